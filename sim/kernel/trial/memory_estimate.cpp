#include "kernel/trial/memory_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernel/trial/derivative_measures.hpp"
#include "kernel/platform/fused_attention.hpp"
#include "kernel/block/gradients.hpp"
#include "kernel/measures/measure_registry.hpp"
#include "kernel/support/memory.hpp"
#include "kernel/trial/platform_table.hpp"
#include "kernel/platform/platform_opencl.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/model/weights.hpp"

namespace rcsim {

namespace {

// The trials computed at once: the worker threads times their trial batch, or the opencl
// platform's batch (simulation.hpp's trial_workers and trial_batch_size).
double trials_in_flight(const ModelSpec& c) {
  const int trials = std::max(c.run.trials, 1);
  const Platform platform = resolved_platform(c);
  if (platform == Platform::opencl) return std::min(trials, opencl_batch_size());
  return static_cast<double>(resolve_threads(c.run.threads, trials)) *
         trial_batch_size(c, platform, c.run.threads, trials);
}

// The recorded layers S and the recorded attention layers S_a (those below L) of `c`.
std::pair<double, double> recorded_layers(const ModelSpec& c) {
  const double L = c.model.layers;
  if (c.output.measure_layers.empty()) return {L + 1, L};
  double Sa = 0;  // layer L has no attention diagnostics
  for (const int t : c.output.measure_layers) Sa += t < c.model.layers;
  return {static_cast<double>(c.output.measure_layers.size()), Sa};
}
}  // namespace

double trial_large_bytes(const ModelSpec& c) {
  const double N = c.model.tokens, d = c.model.dim;
  const auto [S, Sa] = recorded_layers(c);
  double values = 0;
  if (c.output.spectrum) values += S * std::min(N, d);
  values += static_cast<double>(c.output.token_layers.size()) * N * d;
  if (c.output.attention) values += Sa * N * N;
  return 8.0 * values;
}

double results_memory_bytes(const ModelSpec& c, bool whole) {
  const double T = c.run.trials, L = c.model.layers;
  const auto [S, Sa] = recorded_layers(c);
  double token_columns = 0, attention_columns = 0;  // the core measures and the asked ones
  for (const MeasureDef& m : measure_registry())
    if (measure_wanted(c, m))
      (m.axis == MeasureAxis::token ? token_columns : attention_columns) += values_per_layer(m, c.model.tokens);
  const double measures = 8.0 * T * (S * token_columns + Sa * attention_columns);
  // The large per-trial data: freed once a checkpoint flush has written them (run_to_file), so at
  // most the cap, the trials in flight and one more (io/checkpoint.hpp, docs/dev/memory.md).
  const double per_trial = trial_large_bytes(c);
  const double threads = trials_in_flight(c);
  const double large = whole ? T * per_trial : std::min(T * per_trial, kPendingLargeBytes + (threads + 1) * per_trial);
  // The layer tables: column_of_layer and column_of_attention_layer (4 bytes per layer each), the
  // recorded layers' indices in the results, the configuration and the setup (4 bytes each).
  const double tables = 8.0 * (L + 1) + 12.0 * S;
  // For a moment, the larger of: a checkpoint flush's row of every measure of one trial
  // (io/checkpoint.cpp, run_to_file only), and the run file's writer's T x S copy of one measure
  // (log10 mu, or a measure in row-major order) with the coordinates (int64) and four summary
  // statistics per recorded layer (io/run_file.cpp).
  const double row = whole ? 0.0 : 8.0 * (S * token_columns + Sa * attention_columns);
  const double writer = 8.0 * (T * S + 2 * S + 4 * S);
  return measures + large + tables + std::max(row, writer);
}

// The formula, measured against the peak RSS by tests/hostile/memory_estimate.py (ctest
// memory_estimate, within 25%) and documented in docs/dev/memory.md:
//   peak = program + mask + threads x per-thread work + results (+ the image twice, in memory)
// The results are held once: the run file and the checkpoint are written on disk by HDF5
// (h5::File::create_on_disk) one trial of a large dataset at a time, so neither the file's image
// nor a concatenated copy of a dataset is in memory, and the large per-trial data leave memory
// when a checkpoint flush has written them. A file image (run_to_image: Python) holds the whole
// results, the file in memory and its copy: three times the results at most (uncompressed:
// compression cannot be known in advance, so this is an upper bound).
double run_memory_bytes(const ModelSpec& c, bool image) {
  return (image ? 3.0 * results_memory_bytes(c, true) : results_memory_bytes(c)) + work_memory_bytes(c);
}

double trial_work_bytes(const ModelSpec& c) {
  const double N = c.model.tokens, d = c.model.dim;
  const double rk4 = c.integrator == Integrator::rk4 ? 5 * N * d : 0;  // the stages k1..k4 and their point
  // The attention: the N x N matrix (reference platform), or the cpu platform's row blocks of logits
  // and a row buffer on each of the trial's threads (fused_attention.cpp), and its q, k, v (3 N d),
  // or the opencl platform's host copies of q, k, v and the output (4 N d; its N x N work is on the
  // device, platform_opencl.cpp).
  const Platform platform = resolved_platform(c);
  const double attention =
      platform == Platform::cpu      ? threads_per_trial(c) * (fused_rows_per_block(c.model.tokens) + 1.0) * N + 3 * N * d
      : platform == Platform::opencl ? 4 * N * d
                                     : N * N * (c.output.attention ? 2 : 1);
  return 8.0 * (attention + 12 * N * d + rk4 + layer_weight_values(c));
}

double work_memory_bytes(const ModelSpec& c) {
  const double N = c.model.tokens, d = c.model.dim;
  const double per_thread = trial_work_bytes(c) / 8.0;
  const double threads = trials_in_flight(c);
  // The program, its libraries, HDF5's caches and the allocator's arenas: the peak RSS of a tiny
  // run (tests/hostile/memory_estimate.py, case "tiny").
  const double program = kProgramBytes;
  // The gradient measures keep the blocks' inputs and weights for the reverse pass (all of them, or
  // checkpoints and one segment: kernel/block/gradients.hpp), and its work matrices.
  // Stored whole (segment length L), the blocks are copied once more into the segment tape of each
  // reverse pass (stack_backward_segments, StackJacobian).
  const int segment = gradient_segment_length(c);
  const double kept = wants_gradients(c) ? gradient_store_bytes(c, segment) / 8.0 : 0.0;
  const double stored = wants_gradients(c) ? kept * (segment >= c.model.layers ? 2 : 1) + 20 * N * d + 4 * N * N : 0.0;
  // jacobian_log_spec2 keeps the N rows (N x N d) of the Jacobian at a chunk of recorded layers, and
  // the N x N Gram matrix with its eigensolver's work.
  const double S = recorded_layers(c).first;
  const double rows = wants_derivative(c, DerivativePass::jacobian_spec) ? std::min(S, static_cast<double>(jacobian_chunk_layers(c))) * N * N * d + 4 * N * N : 0.0;
  // The mask: N x N bytes and a copy (the graph analysis' transpose, the run file's row-major copy)
  // where the run needs the dense one (needs_dense_mask); else its ranges, O(N) (mask_ranges.hpp).
  const double mask = needs_dense_mask(c) ? 2.0 * N * N : 0.0;
  return program + mask + 8.0 * threads * (per_thread + stored + rows);
}

void require_run_memory(const ModelSpec& c, bool image) {
  const double total = run_memory_bytes(c, image), work = work_memory_bytes(c);
  require_memory(total, "the run of '" + c.output.file + "'",
                 work > total - work
                     ? "most of it is working storage (" + format_bytes(work) +
                           ": the N x N attention matrix, the weights, per worker thread): choose fewer "
                           "model.tokens, a smaller model.dim, or fewer run.threads"
                     : "record fewer layers (output.schedule), snapshots (output.tokens), the spectrum, or fewer trials");
}

}  // namespace rcsim
