// What the production forward keeps for the derivative passes when asked (a cache pointer to
// attention_layer, transformer_block, mlp_forward): the activations at which the adjoint
// (kernel/block/backward.hpp) and the tangent (kernel/block/forward_mode.hpp) linearise the block. With a
// cache the forward takes its general path (no folded W_Q W_K^T, no row ranges, no fused
// attention; tests/test_block_parts.cpp ties the fast path to it by values), so the derivative
// passes never recompute a block with code of their own. Plain data, no functions.
#pragma once

#include <vector>

#include "kernel/support/types.hpp"

namespace rcsim {

// One head of attention_layer's general path: Q = X W_Q (+ 1 b_Q^T), K likewise (after
// QK-normalisation; Q_raw, K_raw the projections before it), A the attention weights (softmax,
// USA or hardmax of the logits, before shaping), As the shaped weights (attention.shape), D the
// dropout mask (0 or 1/(1-p)) and Ad the weights after dropout, XV = X W_V (+ 1 b_V^T) and
// V = XV W_O (or XV), Sc the soft-capped logits (attention.logit_softcap), S the logits the weights
// were computed from (only for a map whose derivative needs them: attention_weights_need_logits). Differential attention
// (kernel/ops/differential_attention.hpp): A = A1 - lambda A2, A1 and A2 its two softmax maps, P the
// head's A XV before its head norm. Empty matrices: the step was not taken.
template <class T>
struct HeadCacheT {
  MatrixT<T> Q, K, Q_raw, K_raw, A, As, D, Ad, XV, V, Sc, S;
  MatrixT<T> A1, A2, P;
  // The attention matrix the head multiplied V with: dropped, shaped or plain.
  const MatrixT<T>& used() const { return Ad.size() ? Ad : (As.size() ? As : A); }
};

// One call of attention_layer: its heads, the output dropout mask D (empty without), F the
// branch output before the tangent projection (residual.project = tangent), and Z the matrix
// its normalisation received (the residual sum; the branch output when alpha = 0).
// dynamics.integrator = rk4: `stages` holds the four evaluations of the field, `points` the stage
// points Z_i, and Z the RK4 sum before the normalisation.
template <class T>
struct LayerCacheT {
  std::vector<HeadCacheT<T>> heads;
  MatrixT<T> D, F, Z;
  std::vector<LayerCacheT<T>> stages;
  std::vector<MatrixT<T>> points;
};

// A sub-block of transformer_block at its placement (kernel/block/block.hpp): its input `in` (kept for
// the MLP's; the attention's is the block's input), Xn = c N(X) (pre, peri), Y the branch output
// before N_out (peri, ngpt; pre: the branch output), Z the sum before the last N (post, ngpt).
template <class T>
struct SubBlockCacheT {
  MatrixT<T> in, Xn, Y, Z;
};

// The MLP's hidden pre-activation X W_in + b_in, its activation (swiglu: silu(pre) .* gate), the
// gate X W_gate (swiglu; empty otherwise), and its output dropout mask (empty without dropout).
template <class T>
struct MlpCacheT {
  MatrixT<T> pre, hidden, gate, D;
};

// One transformer_block: the attention layer's call, the two sub-blocks, the MLP.
template <class T>
struct BlockCacheT {
  LayerCacheT<T> layer;
  SubBlockCacheT<T> attention, mlp;
  MlpCacheT<T> mlp_cache;
};

}  // namespace rcsim
