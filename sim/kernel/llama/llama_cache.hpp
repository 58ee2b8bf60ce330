// What the production Llama forward (kernel/llama/llama_forward.hpp) keeps of one block when asked
// (a cache pointer), for the derivative passes (kernel/llama/llama_backward.hpp): the activations
// at which the block's adjoint and tangent linearise it, so that they never recompute a block
// with code of their own. Plain data, no functions. With ForwardOptions::norm false the row
// scales stay empty and H, H2 are the block input and X_mid themselves.
#pragma once

#include <vector>

#include "kernel/llama/swiglu.hpp"
#include "kernel/support/types.hpp"

namespace rcsim::llama {

// Block t on X [n, d] (positions first_position .. first_position + n - 1):
//   H = RMSNorm(X; g_attn) (row scales rstd_attn), Q = rope(H Wq^T), K = rope(H Wk^T), V = H Wv^T
//   (K and V: every position so far), A the attention weights per query head, att = GQA(Q, K, V),
//   X_mid = X + att Wo^T, H2 = RMSNorm(X_mid; g_mlp) (row scales rstd_mlp), mlp the SwiGLU's cache.
template <class T>
struct LlamaBlockCacheT {
  int first_position = 0;
  MatrixT<T> X, H, Q, K, V, att, X_mid, H2;
  VectorT<T> rstd_attn, rstd_mlp;
  std::vector<MatrixT<T>> A;
  SwigluCacheT<T> mlp;
};

}  // namespace rcsim::llama
