#include "kernel/ops/differential_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernel/ops/normalization.hpp"
#include "kernel/ops/qk_transforms.hpp"
#include "kernel/ops/softmax.hpp"

namespace rcsim {

double diff_lambda_init(int layer) { return 0.8 - 0.6 * std::exp(-0.3 * static_cast<double>(layer - 1)); }

double diff_lambda(const LayerParams& p) {
  return std::isfinite(p.attention.diff_lambda) ? p.attention.diff_lambda : diff_lambda_init(p.layer_number);
}

double diff_head_scale(const LayerParams& p) {
  return p.attention.diff_head_scale == DiffHeadScale::lambda ? 1.0 - diff_lambda(p)
                                                               : 1.0 - diff_lambda_init(p.layer_number);
}

namespace {

inline constexpr double kHeadNormEps = 1e-5;  // the paper's RMSNorm eps (Diff-Transformer's subln)

// 1/sqrt(d_QK / 2): the logits' scale of each map.
template <class T>
T map_scale(const LayerParams& p) {
  return static_cast<T>(1.0 / std::sqrt(p.d_qk / 2.0));
}

// The head norm s RMSNorm over the d_v columns of A XV, s = diff_head_scale(p) as a fixed gain (so
// the forward, the adjoint and the tangent take the same factor).
Normalization head_norm(const LayerParams& p, Eigen::Index dv) {
  const int n = static_cast<int>(dv);
  return Normalization(NormType::rmsnorm, n, kHeadNormEps,
                       std::vector<double>(static_cast<std::size_t>(n), diff_head_scale(p)));
}

// The smallest entry of A over the allowed entries.
template <class T>
double min_allowed(const MatrixT<T>& A, const MaskMatrix& mask) {
  double m = std::numeric_limits<double>::infinity();
  for (Eigen::Index j = 0; j < A.cols(); ++j)
    for (Eigen::Index i = 0; i < A.rows(); ++i)
      if (mask(i, j)) m = std::min(m, static_cast<double>(A(i, j)));
  return m;
}

}  // namespace

template <class T>
AttentionStats differential_weights(const MatrixT<T>& Q, const MatrixT<T>& K, const LayerParams& p, MatrixT<T>& A,
                                    HeadCacheT<T>* c) {
  const Eigen::Index m = Q.cols() / 2;
  const T s = map_scale<T>(p);
  MatrixT<T> A1 = s * (Q.leftCols(m) * K.leftCols(m).transpose());
  MatrixT<T> A2 = s * (Q.rightCols(m) * K.rightCols(m).transpose());
  masked_softmax(A1, *p.mask);
  masked_softmax(A2, *p.mask);
  const T lambda = static_cast<T>(diff_lambda(p));
  A = A1 - lambda * A2;  // masked entries: 0 - lambda 0 = +0 exactly
  AttentionStats stats;
  stats.min_weight = min_allowed<T>(A, *p.mask);
  stats.mean_entropy = 0.5 * (attention_stats(A1, *p.mask).mean_entropy + attention_stats(A2, *p.mask).mean_entropy);
  if (c) c->A1 = std::move(A1), c->A2 = std::move(A2);
  return stats;
}

template <class T>
void add_normalised_head(const MatrixT<T>& A, const MatrixT<T>& XV, const LayerWeightsT<T>& w, std::size_t h,
                         const LayerParams& p, bool direct, MatrixT<T>& Y, HeadCacheT<T>* c) {
  MatrixT<T> Z = A * XV;
  if (c) c->P = Z;
  normalize_rows(Z, head_norm(p, Z.cols()));
  if (!w.o.empty()) Z = Z * w.o[h];
  if (direct)
    Y = Z;
  else
    Y += Z;
}

namespace {

// Through the two maps: dA (of A = A1 - lambda A2, before dropout) to dQ, dK (N x d_k).
template <class T>
void maps_backward(const LayerParams& p, const HeadCacheT<T>& c, const MatrixT<T>& dA, MatrixT<T>& dQ, MatrixT<T>& dK) {
  const Eigen::Index m = c.Q.cols() / 2;
  const T s = map_scale<T>(p);
  const MatrixT<T> dS1 = s * softmax_backward<T>(c.A1, dA, *p.mask);
  const MatrixT<T> dS2 = (-s * static_cast<T>(diff_lambda(p))) * softmax_backward<T>(c.A2, dA, *p.mask);
  dQ.resize(c.Q.rows(), c.Q.cols());
  dK.resize(c.K.rows(), c.K.cols());
  dQ.leftCols(m).noalias() = dS1 * c.K.leftCols(m);
  dQ.rightCols(m).noalias() = dS2 * c.K.rightCols(m);
  dK.leftCols(m).noalias() = dS1.transpose() * c.Q.leftCols(m);
  dK.rightCols(m).noalias() = dS2.transpose() * c.Q.rightCols(m);
}

// The tangent of A = A1 - lambda A2 along dQ, dK.
template <class T>
MatrixT<T> maps_tangent(const LayerParams& p, const HeadCacheT<T>& c, const MatrixT<T>& dQ, const MatrixT<T>& dK) {
  const Eigen::Index m = c.Q.cols() / 2;
  const T s = map_scale<T>(p);
  const MatrixT<T> dS1 =
      s * (dQ.leftCols(m) * c.K.leftCols(m).transpose() + c.Q.leftCols(m) * dK.leftCols(m).transpose());
  const MatrixT<T> dS2 =
      s * (dQ.rightCols(m) * c.K.rightCols(m).transpose() + c.Q.rightCols(m) * dK.rightCols(m).transpose());
  return softmax_jvp<T>(c.A1, dS1, *p.mask) - static_cast<T>(diff_lambda(p)) * softmax_jvp<T>(c.A2, dS2, *p.mask);
}

}  // namespace

template <class T>
void differential_head_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p, std::size_t h,
                                const HeadCacheT<T>& c, const MatrixT<T>& dYh, BlockGradsT<T>& g, MatrixT<T>& dX) {
  const bool biased = !w.q_bias.empty(), norm = p.attention.diff_head_norm;
  const MatrixT<T>& A = c.used();
  // Z: the head's output before W_O (A XV, or its head norm); dZ its gradient.
  MatrixT<T> dZ = dYh;
  if (!w.o.empty()) {
    if (norm) {
      MatrixT<T> Z = c.P;
      normalize_rows(Z, head_norm(p, Z.cols()));
      g.dout[h].noalias() += Z.transpose() * dYh;
    } else {
      g.dout[h].noalias() += c.XV.transpose() * (A.transpose() * dYh);  // (A XV)^T dY
    }
    dZ = dYh * w.o[h].transpose();
  }
  MatrixT<T> dP = dZ;  // the gradient of P = A XV
  if (norm) {
    RowVectorT<T> dgain, dbias;  // the head norm's gain is fixed: its gradient is dropped
    dP = norm_backward<T>(c.P, dZ, head_norm(p, c.P.cols()), dgain, dbias);
  }
  const MatrixT<T> dXV = A.transpose() * dP;
  g.dv[h].noalias() += X.transpose() * dXV;
  if (biased) g.dv_bias[h] += dXV.colwise().sum();
  dX.noalias() += dXV * w.v[h].transpose();
  MatrixT<T> dA = dP * c.XV.transpose();
  if (c.D.size()) dA = dA.cwiseProduct(c.D);  // A_used = D .* A
  MatrixT<T> dQ, dK;
  maps_backward<T>(p, c, dA, dQ, dK);
  qk_transforms_adjoint<T>(p.attention, h, c, dQ, dK);  // attention.rope (the only one allowed with it)
  g.dq[h].noalias() += X.transpose() * dQ;
  g.dk[h].noalias() += X.transpose() * dK;
  if (biased) {
    g.dq_bias[h] += dQ.colwise().sum();
    g.dk_bias[h] += dK.colwise().sum();
  }
  dX.noalias() += dQ * w.q[h].transpose();
  dX.noalias() += dK * w.k[h].transpose();
}

template <class T>
MatrixT<T> differential_head_jvp(const LayerWeightsT<T>& w, const LayerParams& p, std::size_t h, const HeadCacheT<T>& c,
                                 const MatrixT<T>& dX) {
  const MatrixT<T> dXV = dX * w.v[h];
  MatrixT<T> dQ = dX * w.q[h], dK = dX * w.k[h];
  qk_transforms_tangent<T>(p.attention, h, c, dQ, dK);
  MatrixT<T> dA = maps_tangent<T>(p, c, dQ, dK);
  if (c.D.size()) dA = dA.cwiseProduct(c.D);
  MatrixT<T> dZ = c.used() * dXV + dA * c.XV;  // d(A XV)
  if (p.attention.diff_head_norm) dZ = norm_jvp<T>(c.P, dZ, head_norm(p, c.P.cols()));
  if (!w.o.empty()) dZ = dZ * w.o[h];
  return dZ;
}

#define RCSIM_DIFFERENTIAL_OPS(T)                                                                                    \
  template AttentionStats differential_weights<T>(const MatrixT<T>&, const MatrixT<T>&, const LayerParams&,          \
                                                  MatrixT<T>&, HeadCacheT<T>*);                                      \
  template void add_normalised_head<T>(const MatrixT<T>&, const MatrixT<T>&, const LayerWeightsT<T>&, std::size_t,   \
                                       const LayerParams&, bool, MatrixT<T>&, HeadCacheT<T>*);                       \
  template void differential_head_backward<T>(const MatrixT<T>&, const LayerWeightsT<T>&, const LayerParams&,        \
                                              std::size_t, const HeadCacheT<T>&, const MatrixT<T>&, BlockGradsT<T>&, \
                                              MatrixT<T>&);                                                          \
  template MatrixT<T> differential_head_jvp<T>(const LayerWeightsT<T>&, const LayerParams&, std::size_t,             \
                                               const HeadCacheT<T>&, const MatrixT<T>&);
RCSIM_DIFFERENTIAL_OPS(double)
RCSIM_DIFFERENTIAL_OPS(float)
#undef RCSIM_DIFFERENTIAL_OPS

}  // namespace rcsim
