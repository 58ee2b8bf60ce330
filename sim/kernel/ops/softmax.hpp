// The attention weights from the logits S, row by row over the entries the mask allows:
// softmax (kernel/attention.hpp: masked_softmax), USA A = exp(S) / N
// (kernel/unnormalised_attention.hpp) and hardmax (kernel/particles.hpp), with their adjoints and
// tangents. A is the forward's output; masked entries get derivative exactly 0. Hardmax is
// piecewise constant in S: its derivative is 0 (no function here; the head skips the logits).
#pragma once

#include "kernel/types.hpp"

namespace rcsim {

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
