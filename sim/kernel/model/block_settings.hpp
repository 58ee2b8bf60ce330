// The settings of a block, plain data that every operation and the block read: LayerParams (the
// attention layer's: mask, temperature, residual, normalisation, attention settings, dynamics),
// BlockParams (the block's: placement, MLP activation, per-layer ranges, noise step, precision of
// the reverse pass, stop flag) and the table of per-range settings. They sit below the operations
// (kernel/ops/) so that the operations, the block (kernel/block/) and the platforms read one
// description; the functions that fill them (layer_params, block_params, at_layer) are the block's.
#pragma once

#include <atomic>
#include <optional>
#include <vector>

#include "kernel/model/mask_ranges.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/model/normalization_params.hpp"
#include "kernel/model/random.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

struct Dropout;          // kernel/ops/dropout.hpp
struct AttentionKernel;  // kernel/block/attention_kernel.hpp

struct LayerParams {
  const MaskMatrix* mask = nullptr;
  double d_qk = 1.0;
  double alpha = 0.0;  // residual weight; 0 = none
  const Normalization* norm = nullptr;
  const Dropout* dropout = nullptr;  // training-mode dropout (ops/dropout.hpp); nullptr = none
  // The attention's settings, whole (ModelSpec::attention, kernel/model/model_spec.hpp): the kind
  // (softmax | usa: A = exp(S - usa_shift) / N unnormalised | hardmax: A_ij = 1/|S_i| on the
  // maximisers S_i | random_markov: A = softmax(G) on the mask, G = w.logits[h]), the shaping
  // A_h <- a A_h + b I - c C, the logit bias, QK-normalisation, soft-capping. Those that need the
  // general path say so in attention.needs_general_path().
  AttentionSettings attention{};
  // --- Peer dynamics (docs/science/peers.md) ---
  double usa_shift = 0.0;  // attention.usa_normalised: beta = 1/sqrt(d_qk) (weights times e^-beta), else 0
  bool head_mean = false;  // model.head_mix = mean: Y = (1/H) sum_h A_h X W_V,h
  ResidualProject project = ResidualProject::none;  // residual.project = tangent: Y = X + alpha P(Y_attn)
  bool keep_attention = false;  // fill LayerWorkspace::attention_mean (peer measures)
  bool attention_statistics = false;  // report the row and column statistics (attention_statistics.hpp)
  // --- Particles (docs/science/particles.md) ---
  Integrator integrator = Integrator::euler;  // dynamics.integrator = rk4: one classical RK4 step of size
                                             // dt = alpha of the field F(X) = sum_h A_h(X) X W_V,h
                                             // (P-projected with tangent), then normalise
  DynamicsSpeed speed = DynamicsSpeed::field;  // dynamics.speed = unit: the Euler step moves along
                                               // F(X) / |F(X)|_F (dt = alpha is then the arc length of
                                               // the step; F = 0 leaves X unchanged)
  double merge_distance = 0.0;  // dynamics.merge_distance: after the step, token j > i within this Euclidean
                                // distance of token i becomes x_i (0 = never)
  // --- Variants (docs/science/gradients.md) ---
  double skip = 1.0;     // skip gain a of a residual: X_next = N(a X + alpha Y) (only when alpha != 0;
                         // ignored by ngpt, rk4, whose steps fix it)
  double norm_scale = 1.0;  // pre-LN output multiplied by it (norm.depth_scaling: 1/sqrt(l) at layer l)
  // --- Platform (docs/dev/platforms.md) ---
  const AttentionKernel* kernel = nullptr;  // run.platform's kernel (set by Trial; null: the reference heads)
  int threads = 1;     // threads inside the trial for the kernel
  const MaskRows* rows = nullptr;  // the mask's row ranges when known (mask_ranges.hpp), else analysed from *mask
  bool general_path = false;  // the reference heads' general path on range masks too (EngineSetup::general_path)
  int layer_number = 1;  // the block's 1-based index l (set by at_layer): differential attention's lambda_init(l)

  bool usa() const { return attention.kind == AttentionKind::usa; }
  bool hardmax() const { return attention.kind == AttentionKind::hardmax; }
  bool random_markov() const { return attention.kind == AttentionKind::random_markov; }
  bool tangent() const { return project == ResidualProject::tangent; }
  bool rk4() const { return integrator == Integrator::rk4; }
  bool unit_speed() const { return speed == DynamicsSpeed::unit; }
};

// The noise step after a block (dynamics.noise, kernel/ops/noise.hpp): X <- P(X + scale G), G i.i.d.
// N(0, 1) drawn from *rng (the trial's stream kDynamicsNoiseStream). The callers of
// transformer_block apply it (run_trial, the segment replay); block_backward differentiates it.
struct NoiseStep {
  double scale = 0.0;
  const Normalization* norm = nullptr;  // P: none or sphere (config)
  RandomStream* rng = nullptr;
};

struct LayerSetting;
using LayerSettings = std::vector<LayerSetting>;

struct BlockParams {
  LayerParams layer;  // mask, temperature, residual weight a, normalisation N, dropout
  NormPosition position = NormPosition::post;
  MlpActivation activation = MlpActivation::gelu;  // of the MLP, when the weights have one
  bool norm_depth_scaling = false;  // norm.depth_scaling = inv_sqrt_layer: see at_layer()
  // The MLP sub-block's branch weight and skip gain (residual.mlp_alpha); unset = layer.alpha, layer.skip.
  std::optional<double> mlp_alpha, mlp_skip;
  bool single = false;  // run.precision = float32: block_backward computes in float (the forward ignores it)
  const LayerSettings* per_layer = nullptr;  // model.layer_overrides: see at_layer()
  const NoiseStep* noise = nullptr;  // dynamics.noise > 0: the step after each block (nullptr = none)
  // The run's stop flag (SIGINT, SIGTERM, Ctrl-C in Python), polled by at_layer: every loop over
  // blocks (forward, segment replay, reverse pass, Jacobian-vector products, power iterations)
  // then stops within one block, throwing Interrupted. nullptr = never stopped.
  const std::atomic<bool>* cancel = nullptr;
};

// The branch weight and the skip gain of the MLP sub-block of p.
inline double mlp_alpha_of(const BlockParams& p) { return p.mlp_alpha.value_or(p.layer.alpha); }
inline double mlp_skip_of(const BlockParams& p) { return p.mlp_skip.value_or(p.layer.skip); }

// The parameters of blocks from..to (model.layer_overrides, ModelSpec::layer_overrides), resolved
// once from the range's whole configuration by block_params: every block setting (every key
// declared per_layer) may differ by range without code here. `norm` is held here, so the table
// must outlive the BlockParams that point to it.
struct LayerSetting {
  int from = 0, to = 0;  // 0-based, inclusive
  BlockParams params;    // the settings alone: no mask, streams or platform (at_layer takes those from the run's)
  Normalization norm;    // N of the range's norm.* keys
};

}  // namespace rcsim
