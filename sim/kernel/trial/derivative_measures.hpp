// The derivative measures of a trial (docs/science/gradients.md): the gradient and Jacobian
// measures of the reverse pass (kernel/block/gradients.hpp) and the forward-mode spectral norm
// (kernel/block/forward_mode.hpp), filled into the results after the trial's forward pass from its tape
// (kernel/trial/trial_tape.hpp).
#pragma once

#include "kernel/block/block.hpp"
#include "kernel/block/gradients.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/trial/results.hpp"

namespace rcsim {

// Whether `c` asks for a measure of that pass of the derivative measures (the registry's
// MeasureDef::derivative; no measure names here).
bool wants_derivative(const ModelSpec& c, DerivativePass pass);
// The position among r.token_defs of the measure of that pass (std::logic_error if not allocated).
std::size_t derivative_column(const RunResults& r, DerivativePass pass);
// Whether a measure of the reverse pass is asked (MeasurePass::gradients).
bool wants_gradients(const ModelSpec& c);
// The settings the derivative measures refuse (UsageError naming the measure and the key).
void check_derivative_measures(const ModelSpec& c);

// jacobian_log_spec2's chunk: as many recorded layers as their N x (N d) Jacobians fit in
// kGradientStoreBytes (kernel/block/gradients.hpp), at least 1, at most L + 1.
int jacobian_chunk_layers(const ModelSpec& c);

// Every derivative measure of `c` for row `trial` of `r`: the reverse passes from the readout's
// cotangents over the blocks of `replay` (segments of `length` blocks), the Jacobian measures at
// the recorded layers, `chunk_layers` of them at a time (jacobian_log_spec2).
void record_gradients(const ModelSpec& c, int length, int chunk_layers, const SegmentReplay& replay,
                      const BlockParams& params, int trial, RunResults& r);

}  // namespace rcsim
