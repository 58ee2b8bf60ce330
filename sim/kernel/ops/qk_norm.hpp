// QK-normalisation (nGPT; attention.qk_norm, attention.qk_scale = s): the rows of one head's Q and
// K to s q_i / |q_i| and s k_j / |k_j| (a zero row stays 0; the norm in double, as
// normalization.cpp's sphere); the logits are then sqrt(d_k) Q K^T (kernel/ops/qk_transforms.hpp).
// Adjoint and tangent through the rows at the projections the forward kept (HeadCacheT::Q_raw,
// K_raw): normalization.hpp's scaled_sphere_backward and scaled_sphere_jvp.
#pragma once

#include <cstddef>

#include "kernel/model/model_spec.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// Rows of M to s m_i / |m_i| (a zero row stays 0; the norm in double).
template <class T>
void scale_rows_to(MatrixT<T>& M, double s) {
  for (Eigen::Index i = 0; i < M.rows(); ++i) {
    const double r = M.row(i).template cast<double>().norm();
    if (r > 0.0) M.row(i) *= static_cast<T>(s / r);
  }
}

struct QkNormalisation {
  static bool active(const AttentionSettings& a) { return a.qk_norm; }
  template <class T>
  static void forward(const AttentionSettings& a, std::size_t, MatrixT<T>& Q, MatrixT<T>& K, HeadCacheT<T>* c) {
    if (c) c->Q_raw = Q, c->K_raw = K;
    scale_rows_to<T>(Q, a.qk_scale);
    scale_rows_to<T>(K, a.qk_scale);
  }
  template <class T>
  static void adjoint(const AttentionSettings& a, std::size_t, const HeadCacheT<T>& c, MatrixT<T>& dQ, MatrixT<T>& dK) {
    dQ = scaled_sphere_backward<T>(c.Q_raw, dQ, static_cast<T>(a.qk_scale));
    dK = scaled_sphere_backward<T>(c.K_raw, dK, static_cast<T>(a.qk_scale));
  }
  template <class T>
  static void tangent(const AttentionSettings& a, std::size_t, const HeadCacheT<T>& c, MatrixT<T>& dQ, MatrixT<T>& dK) {
    dQ = scaled_sphere_jvp<T>(c.Q_raw, dQ, static_cast<T>(a.qk_scale));
    dK = scaled_sphere_jvp<T>(c.K_raw, dK, static_cast<T>(a.qk_scale));
  }
};

}  // namespace rcsim
