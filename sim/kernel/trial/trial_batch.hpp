// B trials of one run stepped together (issue 34's TrialBatch, the unit a GPU platform drives):
// step() advances every trial one block. Each is a Trial (kernel/trial/trial.hpp) with its own streams
// and its own weights, so trial b of a batch is bitwise the same trial stepped alone.
//
// On the opencl platform the trials step on threads that are members of one OpenclBatch
// (platform_opencl.hpp): each round of their attention calls (one per block, four per RK4 step) is
// ONE kernel enqueue over (trial, head) x row instead of B; the host work of the blocks (norms,
// projections, MLP, noise) runs on those threads in parallel. On the reference and cpu platforms
// the trials step one after another on the calling thread (the cpu platform's attention already
// uses the trial's threads).
//
// The run (kernel/trial/simulation.cpp, run_batch) drives its trials through TrialBatch: each
// worker takes a batch of trial_batch_size() trials and runs each through every block with
// for_each, measuring it between blocks.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "kernel/trial/engine_setup.hpp"
#include "kernel/platform/platform_opencl.hpp"
#include "kernel/trial/trial.hpp"

namespace rcsim {

class TrialBatch {
 public:
  // Trials `trials` (indices into the run) of `s` at layer 0; `s` must outlive the batch.
  TrialBatch(const EngineSetup& s, const std::vector<int>& trials);

  int size() const { return static_cast<int>(trials_.size()); }
  Trial& operator[](int b) { return *trials_[static_cast<std::size_t>(b)]; }
  const Trial& operator[](int b) const { return *trials_[static_cast<std::size_t>(b)]; }

  // Every trial one block (Trial::step), in the batch's order of reports. The first error of any
  // trial is rethrown after every trial's step has ended.
  std::vector<LayerReport> step();
  // `run_one(b, trial)` for every trial b of the batch (it may step it any number of blocks): on
  // the calling thread in order b = 0, 1, ... (reference, cpu), or each on a thread of its own
  // that is a member of the batch's OpenclBatch (opencl: a round of attention calls is ONE launch
  // once every trial still running has one waiting). step() is for_each of one Trial::step. The
  // first error is rethrown after every call has ended.
  void for_each(const std::function<void(int b, Trial& trial)>& run_one);

  // The opencl kernel enqueues of this batch so far (0 on the other platforms).
  int launches() const { return batch_ ? batch_->launches() : 0; }

  // The run's stop flag for every trial (Trial::set_cancel).
  void set_cancel(const std::atomic<bool>* cancel);

 private:
  std::vector<std::unique_ptr<Trial>> trials_;
  std::unique_ptr<OpenclBatch> batch_;  // the opencl platform with B > 1: the trials' attention launched together
};

}  // namespace rcsim
