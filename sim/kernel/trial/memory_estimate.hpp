// How much memory a run needs, estimated before it starts (docs/dev/memory.md): the formula that
// `rcsim run --dry-run` prints and run_to_file checks against the machine.
#pragma once

#include "kernel/model/model_spec.hpp"

namespace rcsim {

// The process's baseline in bytes: the program, its libraries (HDF5, Eigen's, spdlog), HDF5's
// caches, the allocator's arenas; the peak RSS of a tiny run (docs/dev/memory.md).
inline constexpr double kProgramBytes = 23e6;
// The large per-trial data of one trial of `c` in bytes (8 each): the spectrum (recorded layers x
// min(N, d)), the token snapshots (|output.tokens| x N x d), the attention matrices (recorded
// attention layers x N x N).
double trial_large_bytes(const ModelSpec& c);
// The results of a run of `c` in bytes as run_to_file holds them: the token and attention
// measures (core and asked) per recorded layer and the layer tables, whole (8 bytes each); of the
// large per-trial data (trial_large_bytes each), at most kPendingLargeBytes (kernel/support/memory.hpp:
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
// The working storage of one trial in flight in bytes: its attention (N x N, or the platform's
// row blocks), about 12 N x d token-sized matrices and one layer's weights (as work_memory_bytes
// counts it per trial in flight, without the reverse pass's).
double trial_work_bytes(const ModelSpec& c);
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

}  // namespace rcsim
