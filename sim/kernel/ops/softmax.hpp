// The attention weights from the logits S, row by row over the entries the mask allows: softmax,
// hardmax, and USA A = exp(S - c) / N, with their adjoints and tangents (kernel/ops/attention_weights.hpp
// dispatches on attention.kind). A is the forward's output; masked entries get derivative
// exactly 0. Hardmax is piecewise constant in S: its derivative is 0 (the head skips the logits).
#pragma once

#include "kernel/support/types.hpp"

namespace rcsim {

// Row-wise softmax of S (n x m, the mask of the same shape; m = n for self-attention) restricted
// to the entries the mask allows, in place: each row has its allowed maximum subtracted before
// exponentiation (log-sum-exp form); masked entries are set to exactly 0. Every row sums to 1 (each row has its self-loop, so at least one allowed entry).
void masked_softmax(Eigen::Ref<Matrix> S, const MaskMatrix& mask);
void masked_softmax(Eigen::Ref<MatrixF> S, const MaskMatrix& mask);

// Relative tolerance of hardmax ties: j is a maximiser of row i when
//   S_ij >= m_i - tol max(|m_i|, 1),  m_i = max over the allowed j of S_ij,
// tol = 1e-12 in double and 1e-5 in float (a few hundred ulps of the row maximum).
double hardmax_tie_tolerance(bool single);

// Hardmax attention (beta -> infinity; Alcalde, Geshkovski, Ruiz-Balet), in place on the logits:
//   A_ij = 1 / |S_i| for j in S_i, the maximisers of S_ij over the allowed j of row i, 0 elsewhere
// (masked entries exactly 0). Every row sums to 1 (each row has its self-loop).
void hardmax_weights(Eigen::Ref<Matrix> S, const MaskMatrix& mask);
void hardmax_weights(Eigen::Ref<MatrixF> S, const MaskMatrix& mask);  // run.precision = float32

// Unnormalised self-attention "USA" (peer dynamics, docs/science/peers.md; Geshkovski et al.):
//   A_ij = exp(S_ij - c) / N on the entries the mask allows, 0 elsewhere,
// S the logits beta <x_i W_Q, x_j W_K>; rows are not normalised (no softmax denominator). The shift
// c is 0 (attention.kind = usa) or beta (attention.usa_normalised = true: the weights times e^-beta,
// exp(beta(<x_i, x_j> - 1)) / N for unit tokens with W_Q = W_K = I, which stays finite for every beta;
// the flow is the same up to a constant factor e^-beta of time, docs/science/particles.md section 6).
// In place on S (N x N), shifted by `shift` (c above). Logits with S - c above ln(DBL_MAX) overflow to
// +inf (the run then reports non-finite tokens). shift = 0 is the unshifted USA bit for bit. The
// adjoint is the same for every c: dS = A .* dA (usa_backward below).
void usa_weights(Eigen::Ref<Matrix> S, const MaskMatrix& mask, double shift = 0.0);
void usa_weights(Eigen::Ref<MatrixF> S, const MaskMatrix& mask, double shift = 0.0);  // run.precision = float32

// ---- adjoints and tangents ----

// Softmax adjoint: dS_ij = A_ij (dA_ij - sum_k A_ik dA_ik); every row of dS sums to 0.
template <class T>
MatrixT<T> softmax_backward(const MatrixT<T>& A, const MatrixT<T>& dA, const MaskMatrix& mask);
// Softmax tangent: dA_ij = A_ij (dS_ij - sum_k A_ik dS_ik).
template <class T>
MatrixT<T> softmax_jvp(const MatrixT<T>& A, const MatrixT<T>& dS, const MaskMatrix& mask);
// USA (A = exp(S) / N on the mask): dS = A .* dA and dA = A .* dS.
template <class T>
MatrixT<T> usa_backward(const MatrixT<T>& A, const MatrixT<T>& dA, const MaskMatrix& mask);
template <class T>
MatrixT<T> usa_jvp(const MatrixT<T>& A, const MatrixT<T>& dS, const MaskMatrix& mask);

// Double overloads, so that expressions convert (the templates deduce from matrices only).
inline Matrix softmax_backward(const Matrix& A, const Matrix& dA, const MaskMatrix& mask) {
  return softmax_backward<double>(A, dA, mask);
}
inline Matrix usa_backward(const Matrix& A, const Matrix& dA, const MaskMatrix& mask) {
  return usa_backward<double>(A, dA, mask);
}

}  // namespace rcsim
