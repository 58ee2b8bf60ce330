// Trial checkpoints of a run in progress: completed trials are saved to NAME.h5.partial (with
// the run's configuration), so that a crash or Ctrl-C loses only the trials in flight and a
// rerun of the same configuration resumes. The file is reopened for each batch of writes, so a
// crash can damage at most the batch being written; an unreadable checkpoint is discarded.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "run/simulation.hpp"

namespace rcsim {

class Checkpoint {
 public:
  Checkpoint(std::string path, std::string config_ini, double interval_seconds = 10.0);

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
  std::string path_, config_;
  double interval_;
  std::vector<int> pending_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace rcsim
