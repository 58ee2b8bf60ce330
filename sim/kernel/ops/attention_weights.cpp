#include "kernel/ops/attention_weights.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernel/ops/softmax.hpp"

namespace rcsim {

namespace {

// Softpick (Zuhri, Fuadi, Aji 2025, arXiv 2504.20966): A_ij = ReLU(e^{s_ij} - 1) / (sum_k |e^{s_ik} - 1| + eps)
// over the allowed k, computed as the paper's code (zaydzuhri/softpick-attention, naive_softpick_attn.py)
// does, shifted by the row's allowed maximum m: u_j = e^{s_j - m} - e^{-m}, A_j = ReLU(u_j) / D,
// D = sum_k |u_k| + eps, eps = 1e-8 (the code's default). Derivatives of that computed map: with
// E_j = e^{s_j - m}, du_j = E_j ds_j - u_j dm, and m's part cancels but for eps:
//   dA_j = (H(u_j) E_j ds_j - A_j (sum_k sgn(u_k) E_k ds_k + eps ds_top)) / D,  top the maximising column,
// H(0) = sgn(0) = 0 (torch's ReLU and abs at 0).
constexpr double kSoftpickEps = 1e-8;

template <class T>
struct SoftpickRow {
  T m = -std::numeric_limits<T>::infinity(), em = T(0), D = T(kSoftpickEps);
  Eigen::Index top = -1;  // no allowed entry: the row stays 0
};

// Row i's m, e^{-m}, D and maximising column at the logits S.
template <class T, class M>
SoftpickRow<T> softpick_row(const M& S, const MaskMatrix& mask, Eigen::Index i) {
  SoftpickRow<T> r;
  for (Eigen::Index j = 0; j < S.cols(); ++j)
    if (mask(i, j) && (r.top < 0 || S(i, j) > r.m)) r.m = S(i, j), r.top = j;
  r.em = std::exp(-r.m);
  for (Eigen::Index j = 0; j < S.cols(); ++j)
    if (mask(i, j)) r.D += std::abs(std::exp(S(i, j) - r.m) - r.em);
  return r;
}

template <class T>
T sign(T u) {
  return static_cast<T>((u > T(0)) - (u < T(0)));
}

template <class T>
void softpick_weights(Eigen::Ref<MatrixT<T>> S, const MaskMatrix& mask) {
  for (Eigen::Index i = 0; i < S.rows(); ++i) {
    const SoftpickRow<T> r = softpick_row<T>(S, mask, i);
    for (Eigen::Index j = 0; j < S.cols(); ++j)
      S(i, j) = mask(i, j) ? std::max(std::exp(S(i, j) - r.m) - r.em, T(0)) / r.D : T(0);
  }
}

// The adjoint: w = sum_j A_j dA_j, dS_k = E_k (H(u_k) dA_k - sgn(u_k) w) / D, and dS_top -= eps w / D.
template <class T>
MatrixT<T> softpick_backward(const MatrixT<T>& A, const MatrixT<T>& S, const MatrixT<T>& dA, const MaskMatrix& mask) {
  MatrixT<T> dS = MatrixT<T>::Zero(A.rows(), A.cols());
  for (Eigen::Index i = 0; i < A.rows(); ++i) {
    const SoftpickRow<T> r = softpick_row<T>(S, mask, i);
    if (r.top < 0) continue;
    T w = T(0);
    for (Eigen::Index j = 0; j < A.cols(); ++j)
      if (mask(i, j)) w += A(i, j) * dA(i, j);
    for (Eigen::Index k = 0; k < A.cols(); ++k) {
      if (!mask(i, k)) continue;
      const T E = std::exp(S(i, k) - r.m), u = E - r.em;
      dS(i, k) = E * ((u > T(0) ? dA(i, k) : T(0)) - sign(u) * w) / r.D;
    }
    dS(i, r.top) -= static_cast<T>(kSoftpickEps) * w / r.D;
  }
  return dS;
}

// The tangent: dA_j = (H(u_j) E_j dS_j - A_j (sum_k sgn(u_k) E_k dS_k + eps dS_top)) / D.
template <class T>
MatrixT<T> softpick_jvp(const MatrixT<T>& A, const MatrixT<T>& S, const MatrixT<T>& dS, const MaskMatrix& mask) {
  MatrixT<T> dA = MatrixT<T>::Zero(A.rows(), A.cols());
  for (Eigen::Index i = 0; i < A.rows(); ++i) {
    const SoftpickRow<T> r = softpick_row<T>(S, mask, i);
    if (r.top < 0) continue;
    T total = static_cast<T>(kSoftpickEps) * dS(i, r.top);
    for (Eigen::Index j = 0; j < A.cols(); ++j) {
      if (!mask(i, j)) continue;
      const T E = std::exp(S(i, j) - r.m), u = E - r.em, g = E * dS(i, j);
      dA(i, j) = u > T(0) ? g : T(0);
      total += sign(u) * g;
    }
    for (Eigen::Index j = 0; j < A.cols(); ++j)
      if (mask(i, j)) dA(i, j) = (dA(i, j) - A(i, j) * total) / r.D;
  }
  return dA;
}

}  // namespace

template <class T>
void attention_weights(AttentionKind kind, Eigen::Ref<MatrixT<T>> S, const MaskMatrix& mask, double usa_shift) {
  switch (kind) {
    case AttentionKind::usa: return usa_weights(S, mask, usa_shift);
    case AttentionKind::hardmax: return hardmax_weights(S, mask);
    case AttentionKind::softpick: return softpick_weights<T>(S, mask);
    case AttentionKind::softmax:
    case AttentionKind::random_markov: return masked_softmax(S, mask);
  }
}

bool attention_weights_need_logits(AttentionKind kind) { return kind == AttentionKind::softpick; }

template <class T>
MatrixT<T> attention_weights_backward(AttentionKind kind, const MatrixT<T>& A, const MatrixT<T>& S,
                                      const MatrixT<T>& dA, const MaskMatrix& mask) {
  switch (kind) {
    case AttentionKind::usa: return usa_backward<T>(A, dA, mask);
    case AttentionKind::hardmax: return MatrixT<T>::Zero(A.rows(), A.cols());
    case AttentionKind::softpick: return softpick_backward<T>(A, S, dA, mask);
    case AttentionKind::softmax:
    case AttentionKind::random_markov: break;
  }
  return softmax_backward<T>(A, dA, mask);
}

template <class T>
MatrixT<T> attention_weights_jvp(AttentionKind kind, const MatrixT<T>& A, const MatrixT<T>& S, const MatrixT<T>& dS,
                                 const MaskMatrix& mask) {
  switch (kind) {
    case AttentionKind::usa: return usa_jvp<T>(A, dS, mask);
    case AttentionKind::hardmax: return MatrixT<T>::Zero(A.rows(), A.cols());
    case AttentionKind::softpick: return softpick_jvp<T>(A, S, dS, mask);
    case AttentionKind::softmax:
    case AttentionKind::random_markov: break;
  }
  return softmax_jvp<T>(A, dS, mask);
}

#define RCSIM_ATTENTION_WEIGHTS(T)                                                                             \
  template void attention_weights<T>(AttentionKind, Eigen::Ref<MatrixT<T>>, const MaskMatrix&, double);        \
  template MatrixT<T> attention_weights_backward<T>(AttentionKind, const MatrixT<T>&, const MatrixT<T>&,       \
                                                    const MatrixT<T>&, const MaskMatrix&);                     \
  template MatrixT<T> attention_weights_jvp<T>(AttentionKind, const MatrixT<T>&, const MatrixT<T>&,            \
                                               const MatrixT<T>&, const MaskMatrix&);
RCSIM_ATTENTION_WEIGHTS(double)
RCSIM_ATTENTION_WEIGHTS(float)
#undef RCSIM_ATTENTION_WEIGHTS

}  // namespace rcsim
