// The Llama blocks' derivative passes: the main block's (block_backward, block_jvp: kernel/block/)
// on the stack of kernel/llama/llama_block.hpp, at the block inputs of the production forward;
// float64, and the reverse pass also in float32 (`single`: the model rounded to float, every
// product and sum in float, the gradients widened to double; tests/llama/test_llama_float32.cpp).
// Whole sequences (positions 0 ..).
// docs/science/pretrained.md states the formulas; tests/llama/ checks them against finite
// differences and torch autograd.
#pragma once

#include <vector>

#include "kernel/llama/llama_forward.hpp"

namespace rcsim::llama {

// A block of zeros shaped as the blocks of `c` (the gradients of its weights, summed into).
LlamaBlock zero_gradients(const LlamaConfig& c);

// The gradients of a scalar loss of one sequence.
struct LlamaGradients {
  double loss = 0.0;
  Matrix X;                      // X(depth), the last residual state
  std::vector<Matrix> dstates;   // dL/dX(0) .. dL/dX(depth)
  std::vector<LlamaBlock> blocks;  // per block of the model (beyond L layers: summed over the repeats)
  Vector final_norm;             // cross-entropy only: dL/d(final RMSNorm gain)
  Matrix classifier;             // cross-entropy only: dL/d(classifier) [V, d], as if not shared
};

// L = sum(C .* X(depth)) for the residual stream started at X(0) = X0 [T, d] (positions 0 .. T-1).
// With `single`, in float32 (forward and reverse; X0 and C rounded to float).
LlamaGradients stack_gradients(const LlamaModel& m, const Matrix& X0, const Matrix& C, const ForwardOptions& o = {},
                               bool single = false);
// L = -sum_t log softmax(logits(t))[targets[t]] over the positions t with targets[t] >= 0
// (targets -1: not scored), the logits of the token sequence `ids` through the final RMSNorm and
// the classifier. UsageError for targets of another length or outside -1 .. V-1.
LlamaGradients loss_gradients(const LlamaModel& m, const std::vector<int>& ids, const std::vector<int>& targets,
                              const ForwardOptions& o = {}, bool single = false);
// The tangent of X(depth) along dX0 at X(0) = X0: the blocks' tangents composed.
Matrix stack_tangent(const LlamaModel& m, const Matrix& X0, const Matrix& dX0, const ForwardOptions& o = {});

}  // namespace rcsim::llama
