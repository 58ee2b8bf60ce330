// Gradients through a stack of blocks (docs/science/gradients.md): the reverse pass over L
// blocks from the stored block inputs, and the readout loss of the gradient measures.
// Memory: the engine stores the input X(t) of every block (L N d values) and each block's
// weights; block_backward recomputes the activations inside a block from X(t). No sqrt(L)
// checkpointing yet (it would recompute segments from every ~sqrt(L)-th input).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernel/backward.hpp"
#include "kernel/model_spec.hpp"
#include "kernel/types.hpp"

namespace rcsim {

// The RandomStream `stream` index of the readout R of the gradient measures (dropout: 11).
constexpr std::uint64_t kReadoutStream = 12;

// The readout R (d x 1, i.i.d. N(0, 1)) of `trial`: from the stream (seed, trial, kReadoutStream),
// so it does not depend on the thread count or on any other draw of the run.
Vector readout(const ModelSpec& c, int trial);
// dL/dX(L) for the loss L = sum_i (X(L) R)_i = 1^T X(L) R: the N x d matrix 1 R^T.
Matrix readout_cotangent(int tokens, const Vector& R);

// Reverse pass: inputs[t] = X(t), the input of block t (t = 0 .. L-1), weights[t] its weights,
// dXL = dL/dX(L). Returns dL/dX(t) for t = 0 .. L (element L is dXL); on_block(t, g) is called
// with the gradients of block t (from t = L-1 down to 0), if given.
std::vector<Matrix> stack_backward(const std::vector<Matrix>& inputs, const std::vector<LayerWeights>& weights,
                                   const BlockParams& p, const Matrix& dXL,
                                   const std::function<void(int, const BlockGrads&)>& on_block = {});

// sqrt(sum_h ||G_h||_F^2): the Frobenius norm of a list of per-head gradients.
double heads_norm(const std::vector<Matrix>& G);

}  // namespace rcsim
