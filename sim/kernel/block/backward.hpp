// Reverse mode (hand-written adjoints, the way llm.c writes its backward pass) through one
// transformer block (kernel/block/block.hpp), in float64 or (run.precision = float32) float. Notation of docs/science/gradients.md:
// for a scalar loss L, dZ denotes dL/dZ (same shape as Z). block_backward runs the production
// forward of the block (transformer_block) with a cache (kernel/ops/cache.hpp) and composes the
// adjoints of its operations (kernel/ops/) at those activations; the engine stores only each
// block's input X(t) (kernel/block/gradients.hpp).
//
// Covered: every mask (masked entries get weight 0 and gradient exactly 0), H heads, d_QK,
// softmax and USA attention, head_mix sum and mean, W_O (model.value_dim), the normalisations
// none, sphere, projection, layernorm, rmsnorm with gains and biases (norm.params = config or
// file), the placements post, pre, peri, ngpt, the residual weight alpha, the MLP (relu, gelu,
// gelu_tanh, biases), the skip gain s of s X + alpha F (LayerParams::skip) and shaped attention
// a A + b I - c C (LayerParams::shape), attention biases b_Q, b_K, b_V, b_O (attention.bias),
// additive logit biases S + B (ALiBi, decay: LayerParams::logit_bias; B constant, dS unchanged),
// QK-normalisation (LayerParams::qk_norm, qk_scale), the pre-LN scaling c N(X) (LayerParams::norm_scale).
// Also (particles, peers): random-Markov attention A = softmax(G_h) (no gradient reaches W_Q, W_K),
// residual.project = tangent (the projection P_X(A(X)) differentiated in A and in X), the RK4 step
// of the attention flow (dynamics.integrator = rk4: through the four stages), and the noise step
// after a block (dynamics.noise: X <- P(X + scale G), the same draws G, P differentiated).
#pragma once

#include "kernel/block/block.hpp"
#include "kernel/ops/attention_head.hpp"
#include "kernel/model/grads.hpp"
#include "kernel/ops/mlp.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/ops/softmax.hpp"
#include "kernel/ops/tangent_projection.hpp"
#include "kernel/model/random.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// The operations' adjoints (softmax_backward, usa_backward, norm_backward, mlp_backward,
// attention_backward, tangent_backward) are declared with their forwards and tangents in
// kernel/ops/; BlockGradsT in kernel/model/grads.hpp.

// The whole block: given its input X and dL/dX_next, fill g (sized here). With dropout
// (p.layer.dropout with a probability > 0), `dropout` is a copy of the dropout stream as the
// forward pass entered this block: the forward run for the cache draws the same masks from it
// (and advances it).
// With p.single (run.precision = float32) the adjoint computes in float, as the forward does: X,
// the weights and dX_next rounded to float (the float block_backward below), g widened to double.
// With dynamics.noise (p.noise with a scale > 0) dX_next is the gradient of the output after the
// noise step X_next = P(block(X) + scale G), and `noise` a copy of the noise stream as the forward
// pass entered the block's noise draw (G is drawn from it again; the stream advances).
void block_backward(const Matrix& X, const LayerWeights& w, const BlockParams& p, const Matrix& dX_next,
                    BlockGrads& g, RandomStream* dropout = nullptr, RandomStream* noise = nullptr);
// The same adjoint in float arithmetic (one template with the double one, backward.cpp).
void block_backward(const MatrixF& X, const LayerWeightsT<float>& w, const BlockParams& p, const MatrixF& dX_next,
                    BlockGradsT<float>& g, RandomStream* dropout = nullptr, RandomStream* noise = nullptr);
// g = f widened to double.
void widen_grads(const BlockGradsT<float>& f, BlockGrads& g);

// The branch alone (no residual, no normalisation, no dropout): runs attention_layer with a cache
// and returns the adjoint above (g sized by the caller).
template <class T>
MatrixT<T> attention_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                              const MatrixT<T>& dY, BlockGradsT<T>& g);

// Double overload, so that expressions convert (the template deduces from matrices only).
inline Matrix attention_backward(const Matrix& X, const LayerWeights& w, const LayerParams& p, const Matrix& dY,
                                 BlockGrads& g) {
  return attention_backward<double>(X, w, p, dY, g);
}

}  // namespace rcsim
