// RMSNorm with a learned gain (Zhang and Sennrich 2019), row by row:
//   y = g * x / sqrt(mean_k x_k^2 + eps)
// (llama2.c: eps = 1e-5, added inside the square root; the gain multiplies after the scaling).
#pragma once

#include "kernel/types.hpp"

namespace rcsim::llama {

template <class T>
MatrixT<T> rms_norm(const MatrixT<T>& X, const VectorT<T>& gain, double eps);

}  // namespace rcsim::llama
