// The engine: many independent trials of an L-layer stack, measured at every layer.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "kernel/block/backward.hpp"
#include "kernel/trial/derivative_measures.hpp"
#include "kernel/trial/engine_setup.hpp"
#include "kernel/support/errors.hpp"  // Interrupted
#include "kernel/trial/memory_estimate.hpp"
#include "kernel/trial/results.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// Run one trial, writing row `trial` of the results (which must be sized by allocate_results).
// `cancel` is polled between layers (returns false) and by every block loop of the trial, the
// derivative measures' too (BlockParams::cancel: throws Interrupted), when it abandons the trial.
// `layers` (may be null) counts the layers X(0), ..., X(L) reached (a progress per layer).
using LayerCount = std::atomic<long long>;
bool run_trial(const EngineSetup& s, int trial, RunResults& r, const std::atomic<bool>* cancel = nullptr,
               LayerCount* layers = nullptr);
// run_trial for the trials `trials`, run as one TrialBatch (kernel/trial/trial_batch.hpp,
// for_each: one after another on the reference and cpu platforms, together on opencl). Each
// trial's rows are bitwise what run_trial writes for it alone. Returns false when cancelled.
bool run_batch(const EngineSetup& s, const std::vector<int>& trials, RunResults& r,
               const std::atomic<bool>* cancel = nullptr, LayerCount* layers = nullptr);

// The gradients of a scalar loss of X(L) for trial `trial` of `s`, given its cotangent
// dL/dX(L) (N x d): the forward pass as run_trial computes it (same X(0) and weight draws), every
// block kept, then the reverse pass (kernel/block/gradients.hpp). `output` is X(L), dX[t] = dL/dX(t)
// for t = 0 .. L, blocks[t] the gradients of block t's weights. UsageError for what the reverse
// pass does not cover (as for the gradient measures) or a cotangent of the wrong shape.
struct TrialGradients {
  Matrix output;
  std::vector<Matrix> dX;
  std::vector<BlockGrads> blocks;
};
// `cancel` stops it within one block (Interrupted).
TrialGradients trial_gradients(const EngineSetup& s, int trial, const Matrix& cotangent,
                               const std::atomic<bool>* cancel = nullptr);

// How a batch of trials is driven: cancellation, progress (done, total), and a callback after
// each completed trial (both called under one lock, never concurrently).
struct RunControl {
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(int done, int total)> progress;
  std::function<void(int trial)> on_trial_done;
  std::atomic<long long>* layers_done = nullptr;  // run_trial's count of layers, over all trials
  int batch = 0;  // trials per TrialBatch; 0: trial_batch_size's choice (the tests set others)
};

// Run the trials not marked in `skip` (empty = none skipped) into `r` on `threads` worker
// threads (0 = all cores), each worker taking batches of trial_batch_size trials (consecutive in
// `r`'s order) and running each batch (run_batch). The result is bitwise the same for
// any batch size and thread count; on_trial_done is called for each trial of a batch as it ends. Throws Interrupted when cancelled (completed trials stay in `r`).
void run_trials(const EngineSetup& s, int threads, RunResults& r, const std::vector<char>& skip,
                const RunControl& ctl);

// Run all trials. The result is bitwise identical for any thread count.
RunResults run_simulation(const EngineSetup& s, int threads, const std::atomic<bool>* cancel = nullptr,
                          const std::function<void(int done, int total)>& progress = {},
                          std::atomic<long long>* layers_done = nullptr);

// Number of worker threads actually used for `requested` (0 = hardware concurrency) and `trials`.
int resolve_threads(int requested, int trials);

// The threads that run trials: resolve_threads(threads, trials) on the reference and cpu platforms;
// on the opencl platform a batch (OpenclBatch, platform_opencl.hpp) of min(trials,
// opencl_batch_size()) trials in flight, whose attention calls are launched together.
int trial_workers(const EngineSetup& s, int threads, int trials);

// The trials of one TrialBatch in the run, chosen by the platform: on the opencl platform
// min(trials, opencl_batch_size()) (one worker; B x heads problems in one kernel launch); on the
// reference and cpu platforms 1 unless the trial is small (its work space and large data,
// trial_work_bytes + trial_large_bytes, at most kSmallTrialBytes) and keeps no tape for the
// reverse pass, else trials / (2 workers) between 1 and kHostBatch: at least two batches per
// worker thread. The batch is the unit a worker takes and reports (the arithmetic of each trial
// is its own on these platforms, so this shares only the hand-out, its lock and the reports).
constexpr double kSmallTrialBytes = 1 << 20;
constexpr int kHostBatch = 8;
int trial_batch_size(const ModelSpec& c, Platform platform, int threads, int trials);
int trial_batch_size(const EngineSetup& s, int threads, int trials);  // of s.config on s.platform

}  // namespace rcsim
