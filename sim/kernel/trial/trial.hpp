// One trial of the stack, stepped block by block: the shape of OpenMC's init / next_batch /
// finalize. Every front end drives it: run_trial (the measures, kernel/trial/simulation.hpp),
// trial_gradients and the segment replay of the reverse pass (kernel/trial/trial_tape.hpp), the browser
// page (web/engine.cpp) and the benchmark (bench/rcsim_bench.cpp).
//
// A trial's randomness is its own (SCIENCE.md section 7): X(0) and the weights from the stream
// (run.seed, trial), then the streams of dropout and of dynamics.noise. Its state between two
// blocks is therefore X(t), those streams and the weight sampler; save() copies it and resume()
// sets it back, so that a replay from a saved state is bitwise the run itself.
#pragma once

#include <optional>

#include "kernel/block/block.hpp"
#include "kernel/ops/dropout.hpp"
#include "kernel/trial/engine_setup.hpp"
#include "kernel/ops/noise.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/model/random.hpp"
#include "kernel/support/types.hpp"
#include "kernel/model/weights.hpp"

namespace rcsim {

// What a step depends on besides the setup: the tokens X(t) before block `layer`, the trial's
// stream and weight sampler before block t's weights are drawn, and the dropout and noise streams
// (when the run has them).
struct TrialState {
  int layer = 0;
  Matrix X;
  RandomStream rng;
  WeightSampler sampler;
  std::optional<RandomStream> dropout, noise;
};

class Trial {
 public:
  // Trial `trial` of `s` at layer 0: X(0) drawn (or read) and rounded to float for
  // run.precision = float32, the initial noise added. `s` must outlive the trial.
  Trial(const EngineSetup& s, int trial);
  Trial(const Trial&) = delete;  // its parameters point into it
  Trial& operator=(const Trial&) = delete;

  int layer() const { return state_->layer; }         // t: the blocks done
  const Matrix& tokens() const { return state_->X; }  // X(t), in double (float32 runs: exactly their floats)
  // Block t: draws its weights, runs it in the run's precision, applies the noise step
  // (dynamics.noise) and float32's rounding; X(t) -> X(t + 1). The report's degenerate rows include
  // those of the noise step's projection.
  LayerReport step();
  const LayerWeights& weights() const { return *weights_; }  // the last step's block weights
  // The last step's head-averaged attention (kept when the run records attention: EngineSetup).
  const Matrix& attention_mean() const;
  // The blocks' parameters; block t reads at_layer(params(), t). The reverse pass takes them too.
  const BlockParams& params() const { return params_; }
  // The dropout and noise streams as the next step starts (nullptr when the run has none): the
  // reverse pass replays each block's draws from copies of them.
  const RandomStream* dropout_stream() const { return state_->dropout ? &*state_->dropout : nullptr; }
  const RandomStream* noise_stream() const { return state_->noise ? &*state_->noise : nullptr; }

  // The run's stop flag (BlockParams::cancel): every later step, and every pass given params(),
  // throws Interrupted within one block once it is set. nullptr = never stopped.
  void set_cancel(const std::atomic<bool>* cancel) { params_.cancel = cancel; }

  TrialState save() const { return *state_; }
  void resume(const TrialState& state);

 private:
  void point_params();  // params_ at this object's streams

  std::optional<TrialState> state_;  // optional: the sampler is copied, never assigned
  Normalization norm_;
  Dropout dropout_;
  NoiseStep noise_step_;
  double noise_scale_ = 0.0;
  BlockParams params_;
  const LayerWeights* weights_ = nullptr;
  Matrix X_next_;
  std::optional<BlockWorkspace> ws_;
  std::optional<BlockWorkspaceT<float>> ws_float_;
  LayerWeightsT<float> w_float_;
  MatrixF X_float_, X_next_float_;
};

}  // namespace rcsim
