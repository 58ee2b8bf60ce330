// RMSNorm with a learned gain (Zhang and Sennrich 2019), row by row:
//   y = g * x r,   r = 1 / sqrt(mean_k x_k^2 + eps)
// (llama2.c: eps = 1e-5, added inside the square root; the gain multiplies after the scaling).
// The forward, and its adjoint and tangent at the row scales r the forward kept, side by side.
#pragma once

#include "kernel/support/types.hpp"

namespace rcsim::llama {

// With `rstd`, the row scales r (one per row of X) are kept there for the derivative passes.
template <class T>
MatrixT<T> rms_norm(const MatrixT<T>& X, const VectorT<T>& gain, double eps, VectorT<T>* rstd = nullptr);

// Adjoint at the forward's X and r: dY the gradient of Y; returns dX and adds dL/dg into dgain
// (sized d here when empty). Per row, with e = g * dy:
//   dx = r e - (r^3 / d) (x . e) x,   dg += r x * dy.
template <class T>
MatrixT<T> rms_norm_backward(const MatrixT<T>& X, const VectorT<T>& gain, const VectorT<T>& rstd, const MatrixT<T>& dY,
                             VectorT<T>& dgain);
// Tangent along dX (the gain held fixed): dy = g * (r dx - (r^3 / d) (x . dx) x).
template <class T>
MatrixT<T> rms_norm_tangent(const MatrixT<T>& X, const VectorT<T>& gain, const VectorT<T>& rstd, const MatrixT<T>& dX);

}  // namespace rcsim::llama
