// The engine: many independent trials of an L-layer stack, measured at every layer.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "kernel/measure_registry.hpp"
#include "kernel/backward.hpp"
#include "kernel/model_spec.hpp"
#include "kernel/weights.hpp"
#include "kernel/mask.hpp"
#include "kernel/types.hpp"

namespace rcsim {

// The core measures of the registry (kernel/measure_registry.hpp), always recorded: the token
// measures, layers 0..L (layer 0 = the input), in the order of TokenMeasures; the attention
// diagnostics, layers 0..L-1 (the layer t -> t+1 is reported at t).
const std::vector<MeasureInfo>& token_measure_info();
const std::vector<MeasureInfo>& attention_measure_info();

struct RunResults {
  int trials = 0, layers = 0, spectrum_size = 0;
  // The shapes of the large per-trial data: N tokens, d features, the number of snapshot layers
  // (output.tokens).
  int tokens = 0, dim = 0, snapshot_layers = 0;
  // The recorded layers (output.schedule: ascending, 0 and L included) and the recorded
  // attention layers (the same without L); column_of_layer[t] is t's column, -1 if not recorded.
  std::vector<int> layer_index, attention_layer_index;
  std::vector<int> column_of_layer, column_of_attention_layer;
  // token[m] is trials x layer_index.size(), for the m-th entry of token_info (and token_defs):
  // the registry's token measures that are recorded (the core ones and those of output.measures),
  // in registry order (kernel/measure_registry.hpp).
  std::vector<Matrix> token;
  // attention[m] is trials x attention_layer_index.size(), for the m-th entry of attention_info
  // (and attention_defs): the registry's recorded attention measures, in registry order.
  std::vector<Matrix> attention;
  std::vector<MeasureInfo> token_info, attention_info;
  std::vector<const MeasureDef*> token_defs, attention_defs;
  std::vector<Matrix> spectrum;               // per trial: layer_index.size() x min(N, d), if requested
  std::vector<std::vector<Matrix>> snapshots; // per trial, per requested layer: N x d
  // per trial, per recorded attention layer: the head-averaged attention matrix N x N
  // (output.attention)
  std::vector<std::vector<Matrix>> attention_matrices;
  std::vector<int> underflow_layer;  // first layer where mu < DBL_MIN (-1: never)
  std::vector<int> nonfinite_layer;  // first layer with a non-finite entry (-1: never); the trial
                                     // stops there and later measures are NaN
  std::vector<int> degenerate_total; // degenerate rows summed over layers
};

struct EngineSetup {
  ModelSpec config;
  MaskMatrix mask;
  MaskGraph graph;
  InputArrays files;
  int max_rank = 0;        // largest rank the layers 1..L allow
  int max_rank_input = 0;  // min(N, d), for layer 0
  // Blocks per segment of the gradient measures' reverse pass (kernel/gradients.hpp); 0: the
  // automatic gradient_segment_length. Every value gives the same results (tests set it).
  int gradient_segment = 0;
  // Recorded layers whose Jacobian rows jacobian_log_spec2 keeps at a time (one set of N reverse
  // passes per chunk); 0: the automatic jacobian_chunk_layers. Every value gives the same results.
  int jacobian_chunk = 0;
};

// jacobian_log_spec2's chunk: as many recorded layers as their N x (N d) Jacobians fit in
// kGradientStoreBytes (kernel/gradients.hpp), at least 1, at most L + 1.
int jacobian_chunk_layers(const ModelSpec& c);

// Everything the engine needs before the first trial, from the model, its mask (built from
// mask.type, or `custom` for mask.type = custom) and its input arrays (the weight source:
// io/inputs.hpp reads them from files), checked (UsageError for bad shapes or values).
// io/inputs.hpp's prepare(c) reads the files and calls this.
EngineSetup prepare(const ModelSpec& c, const MaskMatrix* custom, InputArrays inputs);

// Run one trial, writing row `trial` of the results (which must be sized by allocate_results).
// `cancel` is polled between layers; returns false if the trial was abandoned because of it.
// `layers` (may be null) counts the layers X(0), ..., X(L) reached (a progress per layer).
using LayerCount = std::atomic<long long>;
bool run_trial(const EngineSetup& s, int trial, RunResults& r, const std::atomic<bool>* cancel = nullptr,
               LayerCount* layers = nullptr);
RunResults allocate_results(const EngineSetup& s);

// The gradients of a scalar loss of X(L) for trial `trial` of `s`, given its cotangent
// dL/dX(L) (N x d): the forward pass as run_trial computes it (same X(0) and weight draws), every
// block kept, then the reverse pass (kernel/gradients.hpp). `output` is X(L), dX[t] = dL/dX(t)
// for t = 0 .. L, blocks[t] the gradients of block t's weights. UsageError for what the reverse
// pass does not cover (as for the gradient measures) or a cotangent of the wrong shape.
struct TrialGradients {
  Matrix output;
  std::vector<Matrix> dX;
  std::vector<BlockGrads> blocks;
};
TrialGradients trial_gradients(const EngineSetup& s, int trial, const Matrix& cotangent);

// The process's baseline in bytes: the program, its libraries (HDF5, Eigen's, spdlog), HDF5's
// caches, the allocator's arenas; the peak RSS of a tiny run (docs/dev/memory.md).
inline constexpr double kProgramBytes = 23e6;
// The large per-trial data of one trial of `c` in bytes (8 each): the spectrum (recorded layers x
// min(N, d)), the token snapshots (|output.tokens| x N x d), the attention matrices (recorded
// attention layers x N x N).
double trial_large_bytes(const ModelSpec& c);
// The results of a run of `c` in bytes as run_to_file holds them: the token and attention
// measures (core and asked) per recorded layer and the layer tables, whole (8 bytes each); of the
// large per-trial data (trial_large_bytes each), at most kPendingLargeBytes (kernel/memory.hpp:
// the trials completed since the last checkpoint flush) plus one trial per worker thread and one
// more (the trials being computed, a flush's copy), since a flush frees them (io/checkpoint.hpp);
// all of them if that is less. With `whole` (run_to_image: no checkpoint), all of them.
double results_memory_bytes(const ModelSpec& c, bool whole = false);
// Memory a run of `c` needs, in bytes (the peak RSS it is measured against, within 25%: ctest
// memory_estimate): results_memory_bytes(c) once, since the run file and the checkpoint are
// written on disk as they are built, one trial of a large dataset at a time (io/run_file.cpp),
// and the large per-trial data leave memory when checkpointed; with `image` (run_to_image: the
// file built in memory and copied out, for Python) the whole results three times, an upper bound
// (the image is compressed); plus work_memory_bytes(c). run_to_file refuses (UsageError) a run
// that exceeds the physical memory; `rcsim run --dry-run` prints it.
// docs/dev/memory.md has the formula and the measurements.
double run_memory_bytes(const ModelSpec& c, bool image = false);
// The working storage of a run: the program itself (kProgramBytes), the mask and its analysis
// (2 N^2 bytes) and, per worker thread,
// one N x N logits/attention matrix (two with output.attention; on the cpu platform its row blocks
// on each of the trial's threads instead, fused_attention.hpp), about 12 N x d token-sized
// matrices (tokens, Q, K, X W_V, the measures' QR copy, ...) and one layer's weights, all counted
// as float64 (float32 runs need less). A model, not a measurement: bench/scale.py prints both.
double work_memory_bytes(const ModelSpec& c);
// Throw UsageError (naming output.file, the bytes needed and the machine's memory) if
// run_memory_bytes(c, image) exceeds the physical memory.
void require_run_memory(const ModelSpec& c, bool image = false);

struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};

// How a batch of trials is driven: cancellation, progress (done, total), and a callback after
// each completed trial (both called under one lock, never concurrently).
struct RunControl {
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(int done, int total)> progress;
  std::function<void(int trial)> on_trial_done;
  std::atomic<long long>* layers_done = nullptr;  // run_trial's count of layers, over all trials
};

// Run the trials not marked in `skip` (empty = none skipped) into `r` on `threads` worker
// threads (0 = all cores). Throws Interrupted when cancelled (completed trials stay in `r`).
void run_trials(const EngineSetup& s, int threads, RunResults& r, const std::vector<char>& skip,
                const RunControl& ctl);

// Run all trials. The result is bitwise identical for any thread count.
RunResults run_simulation(const EngineSetup& s, int threads, const std::atomic<bool>* cancel = nullptr,
                          const std::function<void(int done, int total)>& progress = {},
                          std::atomic<long long>* layers_done = nullptr);

// Number of worker threads actually used for `requested` (0 = hardware concurrency) and `trials`.
int resolve_threads(int requested, int trials);

}  // namespace rcsim
