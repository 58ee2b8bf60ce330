#include "kernel/trial/trial_tape.hpp"

#include "kernel/trial/derivative_measures.hpp"

namespace rcsim {

LayerReport step_recorded(Trial& trial, BlockTape& tape) {
  tape.inputs.push_back(trial.tokens());
  if (const RandomStream* d = trial.dropout_stream()) tape.dropout.push_back(*d);
  if (const RandomStream* z = trial.noise_stream()) tape.noise.push_back(*z);
  const LayerReport rep = trial.step();
  tape.weights.push_back(trial.weights());
  return rep;
}

TrialTape::TrialTape(const EngineSetup& s, int trial, int segment, const std::atomic<bool>* cancel)
    : s_(s), trial_(trial), recording_(wants_gradients(s.config)),
      length_(segment > 0 ? segment : gradient_segment_length(s.config)), cancel_(cancel) {}

LayerReport TrialTape::step(Trial& trial) {
  if (!recording_) return trial.step();
  if (stores_all()) return step_recorded(trial, tape_);
  if (trial.layer() % length_ == 0) checkpoints_.push_back(trial.save());
  return trial.step();
}

void TrialTape::replay(int b, int e, BlockTape& out) const {
  const auto n = static_cast<std::size_t>(e - b), first = static_cast<std::size_t>(b);
  out = BlockTape();
  if (stores_all()) {
    const auto slice = [&](const auto& v, auto& to) {
      if (!v.empty()) to.assign(v.begin() + first, v.begin() + first + n);
    };
    slice(tape_.inputs, out.inputs);
    slice(tape_.weights, out.weights);
    slice(tape_.dropout, out.dropout);
    slice(tape_.noise, out.noise);
    return;
  }
  Trial trial(s_, trial_);
  trial.set_cancel(cancel_);
  trial.resume(checkpoints_[first / static_cast<std::size_t>(length_)]);
  for (std::size_t k = 0; k < n; ++k) step_recorded(trial, out);
}

}  // namespace rcsim
