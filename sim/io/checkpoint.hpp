// Trial checkpoints of a run in progress: completed trials are saved to NAME.h5.partial (with
// the run's configuration), so that a crash or Ctrl-C loses only the trials in flight and a
// rerun of the same configuration resumes. Each batch of writes rewrites the whole checkpoint to
// an exclusive temporary that replaces it when written and checked, so the checkpoint on disk is
// always a whole one; an unreadable checkpoint (from elsewhere) is discarded.
// The checkpoint records its configuration (the result-relevant part, see result_configuration)
// and a hash of it, and the SHA-256 of each input file (attribute `input_sha256`, as in the run
// file; absent when the run reads no file); one of another configuration or of other inputs'
// content (or without digests while the run reads a file) is discarded with a warning, never
// resumed. A checkpoint that
// cannot be written (disk full) stops the run with an error that says so; the previous one stays.
//
// Bounded memory (docs/dev/memory.md): a trial's large data (the spectrum, the token snapshots,
// the attention matrices) leave memory once a flush has written them; a flush happens every
// `interval` and also when the completed trials not yet written hold more than `cap` bytes of
// large data (kPendingLargeBytes), so that at most about the cap is held. The run file's writer
// reads those trials' rows back from the checkpoint (read_large), the same float64 values.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"
#include "io/input_digest.hpp"
#include "kernel/support/memory.hpp"
#include "kernel/trial/simulation.hpp"

namespace rcsim {

// The configuration INI without the keys that do not change results (run.threads, output.file):
// what a checkpoint must match to be resumed, and what a complete run file must match to be kept.
std::string result_configuration(const std::string& config_ini);
// FNV-1a 64-bit hash of a text, as 16 hex digits (stable across builds and machines).
std::string text_hash(const std::string& text);

// The large per-trial data a checkpoint holds for each trial: a dataset [count, rows, cols] of
// the trial's matrices (the spectrum is one S x min(N, d) matrix), in the run file's row order.
enum class LargeData { spectrum, snapshots, attention_matrices };

class Checkpoint {
 public:
  // `inputs`: the digests of the files the run reads (input_digests(c); empty when none).
  Checkpoint(std::string path, std::string config_ini, InputDigests inputs, double interval_seconds = 10.0,
             double cap_bytes = kPendingLargeBytes);
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  // Copy the measures and diagnostics of the trials saved under the same configuration into `r`;
  // returns the mask of trials loaded (1 = done). Their large data stay in the checkpoint
  // (stored(t)): each is read once, one trial at a time, to check its shape and that it reads,
  // and not kept. A checkpoint of another configuration or an unreadable one is removed.
  std::vector<char> load(RunResults& r);

  // Note a completed trial; writes the pending trials if the interval has passed or their large
  // data exceed the cap.
  void completed(RunResults& r, int trial);
  // Write every pending trial now, then free their large data in `r` (stored(t) from then on).
  void flush(RunResults& r);
  // Delete the checkpoint file (after the run file is complete).
  void remove();

  // True if trial `t`'s large data are in the checkpoint file and no longer in memory.
  bool stored(int trial) const;
  // True if the checkpoint file holds trials of this run (loaded, or written by a flush).
  bool written() const;
  // The values of one of trial `t`'s large data (stored(t)) in C order, as the run file stores
  // them: its matrices one after the other, each row-major; the stored shape is checked against
  // `r`'s. The file stays open for reading until the next flush or remove.
  std::vector<double> read_large(const RunResults& r, int trial, LargeData which) const;

  const std::string& path() const { return path_; }

 private:
  void write_pending(const h5::File& f, const RunResults& r) const;
  void free_pending(RunResults& r);

  std::string path_, config_, hash_;
  InputDigests inputs_;
  bool broken_ = false;  // a write failed: no more writes
  double interval_, cap_;
  std::vector<int> pending_;
  double pending_bytes_ = 0;  // large data of the pending trials
  std::vector<char> stored_;  // per trial: large data in the file only
  mutable std::optional<h5::File> reader_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace rcsim
