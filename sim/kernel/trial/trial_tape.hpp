// What the reverse pass of a trial needs (docs/science/gradients.md): every block's input, weights
// and dropout and noise streams, kept whole when they fit (segment length L), or else a saved
// TrialState every `length` blocks, from which replay() steps a fresh Trial through a segment:
// the forward's own code, so the replayed blocks are bitwise the ones the trial ran.
#pragma once

#include <vector>

#include "kernel/trial/engine_setup.hpp"
#include "kernel/block/gradients.hpp"
#include "kernel/trial/trial.hpp"

namespace rcsim {

// Block t of `trial` stepped, with its input X(t), its dropout and noise streams and its weights
// appended to `tape`.
LayerReport step_recorded(Trial& trial, BlockTape& tape);

class TrialTape {
 public:
  // For trial `trial` of `s`: `segment` blocks per segment (0: gradient_segment_length); records
  // nothing unless the run asks for a measure of the reverse pass.
  TrialTape(const EngineSetup& s, int trial, int segment, const std::atomic<bool>* cancel = nullptr);
  bool recording() const { return recording_; }
  int length() const { return length_; }  // blocks per segment (L when all are stored)
  // trial.step(), keeping what the reverse pass of that block needs.
  LayerReport step(Trial& trial);
  // The blocks [b, e): the stored ones, or replayed from the saved state at b.
  void replay(int b, int e, BlockTape& out) const;
  SegmentReplay segments() const {
    return [this](int b, int e, BlockTape& out) { replay(b, e, out); };
  }

 private:
  bool stores_all() const { return length_ >= s_.config.model.layers; }

  const EngineSetup& s_;
  int trial_ = 0;
  bool recording_ = false;
  int length_ = 0;
  const std::atomic<bool>* cancel_ = nullptr;  // the replays' stop flag
  BlockTape tape_;                      // every block's, when stored whole
  std::vector<TrialState> checkpoints_;  // else the state before blocks 0, length, 2 length, ...
};

}  // namespace rcsim
