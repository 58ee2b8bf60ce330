// Gradients through a stack of blocks (docs/science/gradients.md): the reverse pass over L
// blocks from the stored block inputs, and the readout loss of the gradient measures.
// Memory: block_backward recomputes the activations inside a block from its input X(t). The engine
// stores every block's input and weights when they fit in kGradientStoreBytes; deeper runs keep a
// checkpoint every ~sqrt(L) blocks and recompute one segment of blocks at a time from it
// (stack_backward_segments).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernel/block/backward.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/model/random.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// The streams of the readout and of the probes: kReadoutStream, kProbeStream, kFullProbeStream
// (kernel/model/random.hpp).

// The readout R (d x 1, i.i.d. N(0, 1)) of `trial`: from the stream (seed, trial, kReadoutStream),
// so it does not depend on the thread count or on any other draw of the run; or, when
// metrics.readout_vector is given, that vector in every trial.
Vector readout(const ModelSpec& c, int trial);
// dL/dX(L) for the loss L = sum_i (X(L) R)_i = 1^T X(L) R: the N x d matrix 1 R^T.
Matrix readout_cotangent(int tokens, const Vector& R);
// dL/dX(L) of metrics.readout: 1 R^T (all_tokens), or e_N R^T (last_token: row N - 1 only).
Matrix readout_cotangent(int tokens, const Vector& R, Readout which);

// Reverse pass: inputs[t] = X(t), the input of block t (t = 0 .. L-1), weights[t] its weights,
// dXL = dL/dX(L). Returns dL/dX(t) for t = 0 .. L (element L is dXL); on_block(t, g) is called
// with the gradients of block t (from t = L-1 down to 0), if given.
std::vector<Matrix> stack_backward(const std::vector<Matrix>& inputs, const std::vector<LayerWeights>& weights,
                                   const BlockParams& p, const Matrix& dXL,
                                   const std::function<void(int, const BlockGrads&)>& on_block = {});

// The reverse pass in segments [b, e) of `length` blocks (the last one may be shorter), from the
// last segment to the first: replay(b, e, tape) fills the inputs X(b..e-1), weights (and dropout
// streams) of one segment (memory: one segment at a time). on_dx(t, dL/dX(t)) is called for t = L .. 0 and
// on_block(t, g) as in stack_backward. Returns dL/dX(0). Equal, value for value, to stack_backward
// over the same inputs and weights.
// What the reverse pass needs of the blocks of one segment: their inputs and weights, and with
// dropout the dropout stream as the forward pass entered each block (empty without dropout), with
// dynamics.noise the noise stream as the forward pass entered each block's noise draw (empty without).
struct BlockTape {
  std::vector<Matrix> inputs;
  std::vector<LayerWeights> weights;
  std::vector<RandomStream> dropout;
  std::vector<RandomStream> noise;
};
using SegmentReplay = std::function<void(int begin, int end, BlockTape& tape)>;
Matrix stack_backward_segments(int layers, int length, const SegmentReplay& replay, const BlockParams& p,
                               const Matrix& dXL, const std::function<void(int, const Matrix&)>& on_dx,
                               const std::function<void(int, const BlockGrads&)>& on_block = {});

// The reverse pass keeps every block's input and weights up to this many bytes per worker thread;
// beyond it, checkpoints every ~sqrt(L) blocks (gradient_segment_length).
constexpr double kGradientStoreBytes = 64.0 * 1024 * 1024;
// The values one block's weights hold (the attention heads, biases, MLP, normalisation slots).
double layer_weight_values(const ModelSpec& c);
// The blocks per segment of the reverse pass: L (everything stored) when L blocks' inputs and
// weights take at most kGradientStoreBytes, else ceil(sqrt(L)).
int gradient_segment_length(const ModelSpec& c);
// The bytes the reverse pass keeps per worker thread with segments of `length` blocks: the
// checkpoints (an input, the weight sampler's current weights) and one segment's inputs and weights.
double gradient_store_bytes(const ModelSpec& c, int length);

// sqrt(sum_h ||G_h||_F^2): the Frobenius norm of a list of per-head gradients.
double heads_norm(const std::vector<Matrix>& G);

}  // namespace rcsim
