#include "kernel/trial/trial.hpp"

#include "kernel/trial/platform_table.hpp"

namespace rcsim {

Trial::Trial(const EngineSetup& s, int trial)
    : state_(TrialState{0, Matrix(), RandomStream(s.config.run.seed, static_cast<std::uint64_t>(trial)),
                        WeightSampler(s.config, s.files), std::nullopt, std::nullopt}),
      norm_(Normalization::from_config(s.config)),
      noise_scale_(dynamics_noise_scale(s.config)) {
  const ModelSpec& c = s.config;
  const int N = c.model.tokens, d = c.model.dim;
  state_->X = initial_tokens(c, s.files, trial, state_->rng);
  add_initial_noise(c, trial, state_->X);
  state_->sampler.begin_trial(state_->rng);
  if (c.dropout.attention > 0.0 || c.dropout.output > 0.0)
    state_->dropout.emplace(c.run.seed, static_cast<std::uint64_t>(trial), kDropoutStream);
  if (noise_scale_ > 0.0) state_->noise.emplace(c.run.seed, static_cast<std::uint64_t>(trial), kDynamicsNoiseStream);
  // The dense mask where the setup has one, and its row ranges (the cpu platform reads them alone).
  params_ = block_params(c, s.mask.size() ? &s.mask : nullptr, &norm_);
  if (!s.rows.lo.empty()) params_.layer.rows = &s.rows;
  params_.layer.kernel = platform_entry(s.platform).kernel();
  params_.layer.threads = s.trial_threads;
  params_.layer.keep_attention = s.keep_attention;
  params_.layer.attention_statistics = s.attention_statistics;
  params_.layer.general_path = s.general_path;
  if (!s.per_layer.empty()) params_.per_layer = &s.per_layer;  // built once by prepare
  // run.precision = float32: the block computes in float (transformer_block's float overload) on
  // the tokens and weights rounded to float; X holds the float tokens exactly, in double.
  params_.single = c.run.precision == Precision::float32;
  if (params_.single) {
    state_->X = state_->X.cast<float>().cast<double>();
    ws_float_.emplace(N, d, c.model.key_dim);
  } else {
    ws_.emplace(N, d, c.model.key_dim);
  }
  X_next_.resize(N, d);
  dropout_ = Dropout{c.dropout.attention, c.dropout.output, nullptr};
  point_params();
}

void Trial::point_params() {
  dropout_.rng = state_->dropout ? &*state_->dropout : nullptr;
  params_.layer.dropout = state_->dropout ? &dropout_ : nullptr;
  noise_step_ = NoiseStep{noise_scale_, &norm_, state_->noise ? &*state_->noise : nullptr};
  params_.noise = state_->noise ? &noise_step_ : nullptr;
}

void Trial::resume(const TrialState& state) {
  state_.emplace(state);
  weights_ = nullptr;
  point_params();
}

const Matrix& Trial::attention_mean() const {
  return params_.single ? ws_float_->layer.attention_mean : ws_->layer.attention_mean;
}

LayerReport Trial::step() {
  const int t = state_->layer;
  weights_ = &state_->sampler.layer(t, state_->rng);
  LayerReport rep;
  if (params_.single) {
    cast_weights(*weights_, w_float_);
    X_float_ = state_->X.cast<float>();
    rep = transformer_block(X_float_, w_float_, at_layer(params_, t), *ws_float_, X_next_float_);
    X_next_ = X_next_float_.cast<double>();
  } else {
    rep = transformer_block(state_->X, *weights_, at_layer(params_, t), *ws_, X_next_);
  }
  if (state_->noise) {  // after the deterministic step (kernel/ops/noise.hpp), then float32's rounding
    rep.degenerate_rows += apply_dynamics_noise(X_next_, noise_scale_, *state_->noise, norm_);
    if (params_.single) X_next_ = X_next_.cast<float>().cast<double>();
  }
  state_->X.swap(X_next_);
  ++state_->layer;
  return rep;
}

}  // namespace rcsim
