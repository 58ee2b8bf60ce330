// Reverse mode (hand-written adjoints, the way llm.c writes its backward pass) through one
// transformer block (kernel/block.hpp), in float64 or (run.precision = float32) float. Notation of docs/science/gradients.md:
// for a scalar loss L, dZ denotes dL/dZ (same shape as Z). Every backward function recomputes
// the forward activations it needs from the block's input with the forward code's own functions
// (attention_logits, masked_softmax, usa_weights, normalize_rows, mlp_activation); the engine
// stores only each block's input X(t) (kernel/gradients.hpp).
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

#include <vector>

#include "kernel/block.hpp"
#include "kernel/random.hpp"
#include "kernel/types.hpp"

namespace rcsim {

// Softmax adjoint, row by row over the entries the mask allows (A the softmax output):
//   dS_ij = A_ij (dA_ij - sum_k A_ik dA_ik),   dS_ij = 0 exactly where mask_ij = 0.
// Every row of dS sums to 0 (up to rounding).
Matrix softmax_backward(const Matrix& A, const Matrix& dA, const MaskMatrix& mask);
// USA adjoint (A = exp(S) / N on the mask): dS = A .* dA, 0 where the mask is 0.
Matrix usa_backward(const Matrix& A, const Matrix& dA, const MaskMatrix& mask);

// Normalisation adjoint: Y is the input of normalize_rows, dOut the gradient of its output.
// Returns dY; adds dL/dg and dL/db (1 x d) into dgain, dbias (layernorm: both; rmsnorm: gain).
// Degenerate rows (no direction: the forward's convention) pass no gradient.
Matrix norm_backward(const Matrix& Y, const Matrix& dOut, const Normalization& norm, RowVector& dgain,
                     RowVector& dbias);

// MLP adjoint: X the MLP's input, dOut the gradient of M(X). Returns dX, fills the weight grads.
template <class T>
struct MlpGradsT {
  MatrixT<T> d_in, d_out;          // dL/dW_in (d x m), dL/dW_out (m x d)
  RowVectorT<T> d_in_bias, d_out_bias;  // dL/db_in (m), dL/db_out (d); empty without biases
};
using MlpGrads = MlpGradsT<double>;
Matrix mlp_backward(const Matrix& X, const LayerWeights& w, MlpActivation act, const Matrix& dOut, MlpGrads& g);

// The gradients of one block: w.r.t. its input and every parameter (shapes as LayerWeights).
// norm gains/biases per slot (NormSlot); with norm.params = config all slots share one N, and
// the gradient w.r.t. that shared gain is the sum over the slots the placement uses.
template <class T>
struct BlockGradsT {
  MatrixT<T> dX;
  std::vector<MatrixT<T>> dq, dk, dv, dout;  // per head; dout (W_O) empty without model.value_dim
  // attention.bias: dL/db_Q, dL/db_K, dL/db_V per head, dL/db_O; empty without attention biases
  std::vector<RowVectorT<T>> dq_bias, dk_bias, dv_bias;
  RowVectorT<T> dout_bias;
  MlpGradsT<T> mlp;                      // empty matrices without an MLP
  RowVectorT<T> dgain[4], dbias[4];      // zero for the slots the placement does not use
};
using BlockGrads = BlockGradsT<double>;

// Attention sub-layer alone (no residual, no normalisation): Y = sum_h A_h X W_V,h (W_O,h)
// (divided by H for head_mix = mean; with attention.bias Q, K, X W_V,h get + 1 b^T and Y + 1 b_O^T).
// Adds into g.dq, dk, dv, dout (and the bias gradients); returns dX.
Matrix attention_backward(const Matrix& X, const LayerWeights& w, const LayerParams& p, const Matrix& dY,
                          BlockGrads& g);

// The whole block: given its input X and dL/dX_next, fill g (sized here). With dropout
// (p.layer.dropout with a probability > 0), `dropout` is a copy of the dropout stream as the
// forward pass entered this block: the recompute draws the same masks from it (and advances it).
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
// The tangent projection's adjoint (residual.project = tangent, kernel/tangent.hpp): for
// F = P_X(V) row by row, P_x v = v - ((v . x) / |x|^2) x, and G = dL/dF, returns dL/dV = P_x(G) and
// sets dX = dL/dX = -c G - e V + 2 c e X row by row, c = (v . x) / |x|^2, e = (G . x) / |x|^2
// (zero rows of X: dV = G, dX = 0).
Matrix tangent_backward(const Matrix& X, const Matrix& V, const Matrix& G, Matrix& dX);
MatrixF norm_backward(const MatrixF& Y, const MatrixF& dOut, const Normalization& norm, RowVectorT<float>& dgain,
                      RowVectorT<float>& dbias);
// g = f widened to double.
void widen_grads(const BlockGradsT<float>& f, BlockGrads& g);

}  // namespace rcsim
