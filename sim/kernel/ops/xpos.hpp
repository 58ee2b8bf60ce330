// xPos (Sun et al. 2023, "A length-extrapolatable transformer"; attention.xpos,
// attention.xpos_scale_base = B): a multiplicative relative-position decay of the logits. Within
// each head of size d_k, the pair of components (2j, 2j+1), j = 0 .. d_k/2 - 1, of the token at
// position i is scaled by zeta_j^(i/B) in q_i and by zeta_j^(-i/B) in k_i,
//   zeta_j = (2j + 0.4 d_k) / (1.4 d_k)  in [2/7, 1),
// so that S_ij = sum_j' zeta_j'^((i-j)/B) q_i,j' k_j,j' / sqrt(d_QK) depends on the positions only
// through i - j: under the causal mask (i >= j) a key j positions back contributes at most
// zeta^((i-j)/B) of its plain logit, fastest in the low pairs (torchscale's XPOS, positions from 0;
// the paper pairs it with rotary embedding, attention.rope, which it commutes with, and which the
// list applies first). The scaling is linear and diagonal, so it is its own adjoint and tangent;
// it keeps nothing in the cache.
#pragma once

#include <cmath>
#include <cstddef>

#include "kernel/model/model_spec.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// zeta_j of the pair (2j, 2j+1) holding component k of a head of size d (torchscale: gamma = 0.4).
inline double xpos_zeta(Eigen::Index k, Eigen::Index d) {
  const double dd = static_cast<double>(d);
  return (static_cast<double>(k - k % 2) + 0.4 * dd) / (1.4 * dd);
}

// M(i, k) times zeta(k)^(sign i / B) (the factor in double, rounded to T); sign +1 for queries,
// -1 for keys. Diagonal: the same call maps tangents forward and cotangents back.
template <class T>
void xpos_scale(MatrixT<T>& M, double scale_base, double sign) {
  for (Eigen::Index k = 0; k < M.cols(); ++k) {
    const double zeta = xpos_zeta(k, M.cols());
    for (Eigen::Index i = 0; i < M.rows(); ++i)
      M(i, k) *= static_cast<T>(std::pow(zeta, sign * static_cast<double>(i) / scale_base));
  }
}

struct XposDecay {
  static bool active(const AttentionSettings& a) { return a.xpos; }
  template <class T>
  static void forward(const AttentionSettings& a, std::size_t, MatrixT<T>& Q, MatrixT<T>& K, HeadCacheT<T>*) {
    xpos_scale<T>(Q, a.xpos_scale_base, 1.0);
    xpos_scale<T>(K, a.xpos_scale_base, -1.0);
  }
  template <class T>
  static void adjoint(const AttentionSettings& a, std::size_t, const HeadCacheT<T>&, MatrixT<T>& dQ, MatrixT<T>& dK) {
    xpos_scale<T>(dQ, a.xpos_scale_base, 1.0);
    xpos_scale<T>(dK, a.xpos_scale_base, -1.0);
  }
  template <class T>
  static void tangent(const AttentionSettings& a, std::size_t h, const HeadCacheT<T>& c, MatrixT<T>& dQ,
                      MatrixT<T>& dK) {
    adjoint<T>(a, h, c, dQ, dK);
  }
};

}  // namespace rcsim
