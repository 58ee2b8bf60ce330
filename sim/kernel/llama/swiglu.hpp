// The SwiGLU MLP (Shazeer 2020) of Llama, row by row:
//   M(x) = W2 ( silu(W1 x) * (W3 x) ),   silu(z) = z / (1 + e^{-z}),
// W1, W3 [m, d], W2 [d, m], * entry by entry; a token row x maps to ((x W1^T) ... ) W2^T.
#pragma once

#include "kernel/types.hpp"

namespace rcsim::llama {

template <class T>
MatrixT<T> swiglu(const MatrixT<T>& X, const MatrixT<T>& w1, const MatrixT<T>& w2, const MatrixT<T>& w3);

}  // namespace rcsim::llama
