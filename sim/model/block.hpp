// One transformer block t -> t+1: the attention layer of SCIENCE.md section 1 with the row
// normalisation N placed after (post), before (pre) or on both sides (peri) of the attention A,
// a the residual weight (residual.alpha):
//   post: X + a A(X) -> N(X + a A(X))       (a = 0: N(A(X)))       the paper's model, the default
//   pre:  X + a A(N(X))                      (a = 0: A(N(X)))       GPT-2 style pre-LN
//   peri: X + a N(A(N(X)))                   (a = 0: N(A(N(X))))    Peri-LN: the same N at both places
// Dropout (model/dropout.hpp) acts inside A: on the attention weights and on A's output.
#pragma once

#include "core/config.hpp"
#include "model/layer.hpp"

namespace rcsim {

struct BlockParams {
  LayerParams layer;  // mask, temperature, residual weight a, normalisation N, dropout
  NormPosition position = NormPosition::post;
};

// Work matrices of a block: the attention layer's, and the normalised input of pre/peri.
struct BlockWorkspace {
  LayerWorkspace layer;
  Matrix normalised;
  BlockWorkspace(int n, int d, int dk) : layer(n, d, dk), normalised(n, d) {}
};

// X_next = block(X); X_next must not alias X. post is exactly attention_layer (bitwise).
// degenerate_rows counts the degenerate rows of every normalisation the block applies.
LayerReport transformer_block(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, const BlockParams& p,
                              BlockWorkspace& ws, Matrix& X_next);

}  // namespace rcsim
