// The MLP (feed-forward) sub-block of a transformer block, row by row:
//   M(X) = act(X W_in + b_in) W_out + b_out,   W_in d x m, W_out m x d (mlp.width = m),
//   act = relu: max(0, z) | gelu: z Phi(z) = z (1 + erf(z / sqrt 2)) / 2 (exact, as BERT and
//   torch.nn.GELU()) | gelu_tanh: z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))) / 2 (GPT-2's) |
//   tanh: tanh(z).
// Biases are added when the weights have them (mlp.bias).
#pragma once

#include "kernel/model_spec.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/types.hpp"
#include "kernel/weights.hpp"

namespace rcsim {

template <class T>
struct MlpWorkspaceT {
  MatrixT<T> hidden;  // N x m
};
using MlpWorkspace = MlpWorkspaceT<double>;

// The activation applied entry by entry.
double mlp_activation(double z, MlpActivation a);
float mlp_activation(float z, MlpActivation a);  // run.precision = float32

// out = M(X) (N x d) with the MLP weights of `w`; out must not alias X. With a cache (the
// derivative passes) the hidden pre-activation X W_in + b_in and activation are kept there.
void mlp_forward(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, MlpActivation a, MlpWorkspace& ws,
                 Matrix& out, MlpCacheT<double>* cache = nullptr);
// The same in float arithmetic (run.precision = float32; erf and tanh of float).
void mlp_forward(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, MlpActivation a,
                 MlpWorkspaceT<float>& ws, MatrixF& out, MlpCacheT<float>* cache = nullptr);

}  // namespace rcsim
