// Weights W_Q, W_K, W_V and initial tokens X(0) (SCIENCE.md section 3), from random draws,
// constants, inline matrices or HDF5 files.
#pragma once

#include <optional>
#include <vector>

#include "core/config.hpp"
#include "hdf5/hdf5_file.hpp"
#include "core/random.hpp"
#include "core/types.hpp"

namespace rcsim {

// The weights of one layer: one matrix per head.
struct LayerWeights {
  std::vector<Matrix> q, k, v;  // q[h], k[h]: d x d_k; v[h]: d x d
};

// Arrays read from weights.file and init.file, checked against the configuration once, before
// any trial runs. Shapes (C order, row convention):
//   /X0   [N, d] or [trials, N, d]
//   /W_Q, /W_K  [d, d_k] or [L, d, d_k]; with H > 1: [H, d, d_k] or [L, H, d, d_k]
//   /W_V  [d, d] or [L, d, d];           with H > 1: [H, d, d] or [L, H, d, d]
struct InputFiles {
  std::optional<h5::Array> x0, w_q, w_k, w_v;
  static InputFiles load(const Config& c);
};

// Draws the weights of each layer of one trial. Random weights come from the trial's stream in
// a fixed order (layer by layer; within a layer W_Q of every head, then W_K, then W_V); with
// weights.shared one draw serves every layer.
// Peer dynamics (docs/peers.md): with weights.redraw_every = K the weights are drawn at layers 0, K,
// 2K, ... and kept in between; with weights.across_trials = shared they come from one stream
// (seed, trial 0, stream 2) restarted for every trial, so all trials see the same weights; with
// weights.qk a bilinear form B (bilinear.hpp) is drawn per head in place of W_Q (W_K = identity);
// weights.v = wishart draws G G^T / sqrt(d), tied_qk sets W_V = weights.v_sign * W_Q W_K^T.
class WeightSampler {
 public:
  WeightSampler(const Config& c, const InputFiles& files);
  // Start a new trial: with shared weights, draws them now.
  void begin_trial(RandomStream& rng);
  // The stream the weights come from: the trial's, or the one shared across trials.
  RandomStream& source(RandomStream& trial_rng) { return own_ ? *own_ : trial_rng; }
  // The weights of `layer` (valid until the next call).
  const LayerWeights& layer(int layer, RandomStream& rng);

 private:
  void draw(int layer, RandomStream& rng, LayerWeights& out) const;
  void draw_one(const WeightSpec& spec, const std::optional<h5::Array>& file, int layer, int head,
                int cols, RandomStream& rng, Matrix& out) const;
  const Config& c_;
  const InputFiles& files_;
  LayerWeights current_;
  std::optional<RandomStream> own_;
};

// X(0) of `trial`, drawn from `rng` for the random types:
//   gaussian: i.i.d. N(0, 1) entries; sphere: Gaussian rows scaled to unit norm (uniform on the
//   sphere); positive: absolute values of Gaussian rows, scaled to unit norm (uniform on the
//   sphere's positive orthant); fixed: init.matrix; file: /X0 of init.file; uniform: i.i.d.
//   entries 2u - 1 uniform on (-1, 1), row by row.
Matrix initial_tokens(const Config& c, const InputFiles& files, int trial, RandomStream& rng);

}  // namespace rcsim
