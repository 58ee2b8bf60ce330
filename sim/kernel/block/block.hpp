// One transformer block t -> t+1: the attention layer of SCIENCE.md section 1 with the row
// normalisation N placed after (post), before (pre) or on both sides (peri) of the attention A,
// a the residual weight (residual.alpha), then optionally the MLP sub-block M (mlp.width > 0,
// model/mlp.hpp) placed the same way with normalisations of its own (N2, N2_out):
//   post: X + a A(X) -> N(X + a A(X))       (a = 0: N(A(X)))       the paper's model, the default
//         then X <- N2(X + a M(X))          (a = 0: N2(M(X)))
//   pre:  X + a A(N(X))                      (a = 0: A(N(X)))       GPT-2 style pre-LN
//         then X <- X + a M(N2(X))          (a = 0: M(N2(X)))
//   peri: X + a N_out(A(N(X)))               (a = 0: N_out(A(N(X))))  Peri-LN
//         then X <- X + a N2_out(M(N2(X)))  (a = 0: N2_out(M(N2(X))))
//   ngpt: N(X + a (N_out(A(X)) - X))         nGPT (Loshchilov et al. 2024): a step of size a
//         then X <- N2(X + a (N2_out(M(X)) - X))   towards the normalised output, renormalised
// With norm.params = config every normalisation is the one N of norm.*; with norm.params = file
// each has the gain and bias of its layer from weights.file (LayerWeights::norms).
// Dropout (ops/dropout.hpp) acts inside A (on the attention weights and on A's output) and on
// M's output (dropout.output), before the residual.
#pragma once

#include <atomic>
#include <optional>

#include "kernel/model/block_settings.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/ops/mlp.hpp"
#include "kernel/model/random.hpp"

namespace rcsim {


// The table of c.layer_overrides (empty when there is none).
LayerSettings layer_settings(const ModelSpec& c);

// The parameters of `c`'s blocks for this mask and normalisation (which must outlive them).
BlockParams block_params(const ModelSpec& c, const MaskMatrix* mask, const Normalization* norm);

// The parameters of block t (0-based): p itself, with the settings of the range of p.per_layer
// that holds t (position, N, alpha, skip, d_qk, activation), and with norm_depth_scaling
// p.layer.norm_scale = 1/sqrt(t + 1), the LayerNorm scaling of layer l = t + 1 (Sun et al. 2025;
// pre-LN only). Every path (forward, segment replay, backward) reads block t's parameters here,
// so it is also where a stop request is honoured: throws Interrupted when p.cancel is set.
BlockParams at_layer(const BlockParams& p, int t);

// Work matrices of a block: the attention layer's, the normalised input of pre/peri, the MLP's.
template <class T>
struct BlockWorkspaceT {
  LayerWorkspaceT<T> layer;
  MatrixT<T> normalised, middle;
  MlpWorkspaceT<T> mlp;
  BlockWorkspaceT(int n, int d, int dk) : layer(n, d, dk) {}  // sized on first use (memory: docs/dev/memory.md)
};
using BlockWorkspace = BlockWorkspaceT<double>;

// X_next = block(X); X_next must not alias X. post without MLP is exactly attention_layer
// (bitwise). degenerate_rows counts the degenerate rows of every normalisation the block applies.
// With a cache (the derivative passes) the block keeps the activations they linearise at
// (kernel/ops/cache.hpp; the attention on its general path).
LayerReport transformer_block(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, const BlockParams& p,
                              BlockWorkspace& ws, Matrix& X_next, BlockCacheT<double>* cache = nullptr);
// The same block in float arithmetic (run.precision = float32): matrix products, softmax,
// normalisations, MLP in float (one template, block.cpp); dropout draws as in double.
LayerReport transformer_block(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, const BlockParams& p,
                              BlockWorkspaceT<float>& ws, MatrixF& X_next, BlockCacheT<float>* cache = nullptr);

}  // namespace rcsim
