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
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"
#include "io/input_digest.hpp"
#include "kernel/simulation.hpp"

namespace rcsim {

// The configuration INI without the keys that do not change results (run.threads, output.file):
// what a checkpoint must match to be resumed, and what a complete run file must match to be kept.
std::string result_configuration(const std::string& config_ini);
// FNV-1a 64-bit hash of a text, as 16 hex digits (stable across builds and machines).
std::string text_hash(const std::string& text);

class Checkpoint {
 public:
  // `inputs`: the digests of the files the run reads (input_digests(c); empty when none).
  Checkpoint(std::string path, std::string config_ini, InputDigests inputs, double interval_seconds = 10.0);

  // Copy the trials saved under the same configuration into `r`; returns the mask of trials
  // loaded (1 = done). A checkpoint of another configuration or an unreadable one is removed.
  std::vector<char> load(RunResults& r);

  // Note a completed trial; writes the pending trials if the interval has passed.
  void completed(const RunResults& r, int trial);
  // Write every pending trial now.
  void flush(const RunResults& r);
  // Delete the checkpoint file (after the run file is complete).
  void remove();

  const std::string& path() const { return path_; }

 private:
  void write_pending(const h5::File& f, const RunResults& r) const;

  std::string path_, config_, hash_;
  InputDigests inputs_;
  bool broken_ = false;  // a write failed: no more writes
  double interval_;
  std::vector<int> pending_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace rcsim
