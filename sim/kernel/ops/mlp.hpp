// The MLP (feed-forward) sub-block of a transformer block, row by row:
//   M(X) = act(X W_in + b_in) W_out + b_out,   W_in d x m, W_out m x d (mlp.width = m),
//   act = relu: max(0, z) | gelu: z Phi(z) = z (1 + erf(z / sqrt 2)) / 2 (exact, as BERT and
//   torch.nn.GELU()) | gelu_tanh: z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))) / 2 (GPT-2's) |
//   tanh: tanh(z) | swiglu: the gated MLP of Llama (SwiGLU, Shazeer 2020, arXiv 2002.05202; llama2.c's
//   w2(silu(w1 x) * (w3 x))) with a third matrix W_gate d x m (LayerWeightsT::mlp_gate, no bias):
//     M(X) = (silu(X W_in + b_in) .* (X W_gate)) W_out + b_out,   silu(z) = z / (1 + e^-z).
// Biases are added when the weights have them (mlp.bias).
// The forward, and its adjoint and tangent at the activations the forward kept (MlpCacheT), in
// double and float.
#pragma once

#include "kernel/model/model_spec.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/model/grads.hpp"
#include "kernel/support/types.hpp"
#include "kernel/model/weights.hpp"

namespace rcsim {


template <class T>
struct MlpWorkspaceT {
  MatrixT<T> hidden, gate;  // N x m (gate: X W_gate, swiglu)
};
using MlpWorkspace = MlpWorkspaceT<double>;

// The activation applied entry by entry (swiglu: silu, which the gate then multiplies).
double mlp_activation(double z, MlpActivation a);
float mlp_activation(float z, MlpActivation a);  // run.precision = float32

// out = M(X) (N x d) with the MLP weights of `w`; out must not alias X. With a cache (the
// derivative passes) the hidden pre-activation X W_in + b_in, activation and gate are kept there.
// swiglu needs w.mlp_gate (d x m): std::invalid_argument without it.
void mlp_forward(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, MlpActivation a, MlpWorkspace& ws,
                 Matrix& out, MlpCacheT<double>* cache = nullptr);
// The same in float arithmetic (run.precision = float32; erf and tanh of float).
void mlp_forward(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, MlpActivation a,
                 MlpWorkspaceT<float>& ws, MatrixF& out, MlpCacheT<float>* cache = nullptr);

// ---- adjoint and tangent ----

// act'(z) for the MLP activations (swiglu: silu'(z) = sigma(z) (1 + z (1 - sigma(z)))).
template <class T>
T activation_derivative(T z, MlpActivation a);

// Adjoint at the forward's cache c (of mlp_forward on X): dOut = dL/dM; returns dX and fills g.
//   dW_out = H^T dM, db_out = 1^T dM, dZ = (dM W_out^T) .* act'(Z), dW_in = X^T dZ, db_in = 1^T dZ;
//   swiglu (U = X W_gate): dZ = (dM W_out^T) .* U .* silu'(Z), dW_gate = X^T ((dM W_out^T) .* silu(Z)),
//   dX = dZ W_in^T + ((dM W_out^T) .* silu(Z)) W_gate^T.
template <class T>
MatrixT<T> mlp_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, MlpActivation act, const MlpCacheT<T>& c,
                        const MatrixT<T>& dOut, MlpGradsT<T>& g);
// The same from X alone: runs mlp_forward with a cache, then the adjoint above.
template <class T>
MatrixT<T> mlp_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, MlpActivation act, const MatrixT<T>& dOut,
                        MlpGradsT<T>& g);
// Tangent: dM = (act'(Z) .* (dX W_in)) W_out; swiglu: dM = (silu'(Z) .* (dX W_in) .* U + silu(Z) .* (dX W_gate)) W_out.
template <class T>
MatrixT<T> mlp_jvp(const LayerWeightsT<T>& w, MlpActivation act, const MlpCacheT<T>& c, const MatrixT<T>& dX);

// Double overload, so that expressions convert (the template deduces from matrices only).
inline Matrix mlp_backward(const Matrix& X, const LayerWeights& w, MlpActivation act, const Matrix& dOut, MlpGrads& g) {
  return mlp_backward<double>(X, w, act, dOut, g);
}

}  // namespace rcsim
