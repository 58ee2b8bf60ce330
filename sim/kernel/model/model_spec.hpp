// The description of a model and of what is measured on it: plain data that the kernel reads.
// The configuration layer (config/config.hpp) fills it from keys; Python and the web page may
// fill it directly. Nothing here parses text or touches files.
#pragma once

#include <memory>
#include <optional>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernel/support/types.hpp"

namespace rcsim {

// Defaults used by more than one struct (here, kernel/ops/normalization.hpp, geometry/brody.hpp): each
// written once. The configuration keys print them (config/keys.cpp, text_of).
inline constexpr double kDefaultNormEps = 1e-5;          // norm.eps
inline constexpr double kDefaultNormAlpha = 0.5;         // norm.alpha (DyT, Derf: Zhu et al. 2025)
inline constexpr std::uint64_t kDefaultSeed = 20240527;  // run.seed

enum class MaskType { complete, causal, sliding_window, unidirectional_sliding_window, custom };
enum class NormType { none, sphere, layernorm, projection, rmsnorm, dyt, derf };
// dyt: g tanh(a y) + b, derf: g erf(a y) + b elementwise (a = norm.alpha), tanh-like maps in
// place of a normalisation (Zhu et al. 2025; Chen et al. 2025).
inline bool norm_has_gain(NormType t) {
  return t == NormType::layernorm || t == NormType::rmsnorm || t == NormType::dyt || t == NormType::derf;
}
inline bool norm_has_bias(NormType t) { return t == NormType::layernorm || t == NormType::dyt || t == NormType::derf; }
inline constexpr NormType kDefaultNormType = NormType::none;  // norm.type (also kernel/ops/normalization.hpp)
enum class WeightType { gaussian, orthogonal, identity, zero, fixed, file, wishart, tied_qk };
enum class InitType { gaussian, sphere, positive, fixed, file, uniform,
                      // --- Particles (docs/science/particles.md) ---
                      circle, equiangular, isometric };

// --- Peer dynamics (docs/science/peers.md) ---
enum class AttentionKind { softmax, usa, hardmax, random_markov, softpick };  // hardmax: docs/science/particles.md;
                                                                             // random_markov, softpick:
                                                                             // docs/science/gradients.md
enum class HeadMix { sum, mean };
enum class ResidualProject { none, tangent };
// --- Particles (docs/science/particles.md): how a layer integrates the flow ---
enum class Integrator { euler, rk4 };
enum class DynamicsSpeed { field, unit };  // dynamics.speed (docs/science/particles.md section 6)
enum class BilinearType { none, gaussian_product, symmetric, goe, wigner, identity };

// Transformer-block structure: where the normalisation sits, and the arithmetic.
enum class NormPosition { post, pre, peri, ngpt };
enum class Precision { float64, float32 };
// run.platform (docs/dev/platforms.md): automatic = cpu where it covers the configuration and
// model.tokens >= kCpuPlatformFromTokens, else reference (never opencl, which is asked for by name).
enum class Platform { automatic, reference, cpu, opencl };
// swiglu: the gated MLP of Llama (Shazeer 2020), silu(X W_in + b_in) .* (X W_gate), with a third matrix.
enum class MlpActivation { relu, gelu, gelu_tanh, tanh, swiglu };

// --- Variants (docs/science/gradients.md, "Variants") ---
// How the skip gain a of X <- a X + b F(X) is chosen (b = residual.alpha): none (a = residual.skip),
// cowsik (a = sqrt(1 - b^2), Cowsik et al. 2024), deepnorm (a = (2L)^(1/4), Wang et al. 2022).
enum class ResidualMixing { none, cowsik, deepnorm };
// Shaped attention (Noci et al. 2023): A <- a A + b I - c C, C the uniform attention over the
// mask (row i: 1/|N_i| on the allowed set N_i); a = 1, b = 0, c = 1 removes the spectral gap.
struct AttentionShape {
  double a = 1.0, b = 0.0, c = 0.0;
  bool active() const { return a != 1.0 || b != 0.0 || c != 0.0; }
};
// Additive attention biases beside the binary mask (SCIENCE.md section 6): logits S_ij + B_ij
// before the softmax. alibi: B_ij = -m_h |i - j|, m_h = 2^(-8h/H), h = 1..H; decay:
// B_ij = |i - j| log gamma (weights proportional to gamma^|i-j|). For the causal mask |i - j| = i - j
// on every allowed entry; other masks get the symmetric |i - j|.
enum class LogitBiasKind { none, alibi, decay, file };  // file: B from weights.file /logit_bias
// Depth-dependent scaling: residual.depth_scaling = inv_sqrt_depth multiplies the branch gain by
// 1/sqrt(L) (L = model.layers); norm.depth_scaling = inv_sqrt_layer multiplies the output of the pre-LN
// normalisations of layer l (1-based) by 1/sqrt(l) (LayerNorm scaling, Sun et al. 2025).
enum class ResidualDepthScaling { none, inv_sqrt_depth };
enum class NormDepthScaling { none, inv_sqrt_layer };
// attention.diff_head_scale: the factor of differential attention's head norm, (1 - lambda_init(l))
// as the paper's code (a constant of the layer) or (1 - lambda) with the lambda the maps use.
enum class DiffHeadScale { lambda_init, lambda };
struct LogitBias {
  LogitBiasKind kind = LogitBiasKind::none;
  double gamma = 1.0;  // attention.decay (decay only)
  bool active() const { return kind != LogitBiasKind::none; }
};

// The attention's own settings (the attention.* keys of a block), one struct that ModelSpec holds
// and LayerParams holds whole (kernel/block/layer.hpp): a new attention setting is one member here, and
// model.layer_overrides can set it per layer range without more code. A setting that only the
// general path computes (logits formed one head at a time, N x N) says so in needs_general_path(),
// which the fast path (folded W_Q W_K^T) and the fused platforms (cpu, opencl) both ask.
struct AttentionSettings {
  AttentionKind kind = AttentionKind::softmax;  // attention.kind
  bool usa_normalised = false;  // attention.usa_normalised: USA weights exp(S - beta) / N
  AttentionShape shape;  // attention.shape_a/b/c: A <- a A + b I - c C after the softmax (Noci et al. 2023)
  LogitBias logit_bias;  // attention.logit_bias, attention.decay: S_h + B_h before the softmax
  // QK-normalisation (nGPT; attention.qk_norm, attention.qk_scale): S = sqrt(d_k) (s q_i/|q_i|).(s k_j/|k_j|)
  bool qk_norm = false;
  double qk_scale = 1.0;
  double logit_softcap = 0.0;  // attention.logit_softcap: S <- c tanh(S / c) (Gemma 2); 0 = off
  // attention.rope, attention.rope_theta: rotary position embedding of Q and K (llama2.c's adjacent
  // pairs, token i at position i; kernel/ops/rotary.hpp) before the logits
  bool rope = false;
  double rope_theta = 10000.0;
  // attention.xpos, attention.xpos_scale_base: xPos's relative-position decay of Q and K (Sun et al.
  // 2023; kernel/ops/xpos.hpp) before the logits
  bool xpos = false;
  double xpos_scale_base = 512.0;
  // attention.differential, attention.diff_lambda, attention.diff_head_norm: differential attention
  // (Ye et al. 2024; kernel/ops/differential_attention.hpp): each head's Q and K split in halves,
  // A = softmax(Q1 K1^T / sqrt(d_QK/2)) - lambda softmax(Q2 K2^T / sqrt(d_QK/2)); lambda NaN = auto
  // (lambda_init(l) = 0.8 - 0.6 exp(-0.3 (l - 1)) at layer l); head norm: (1 - lambda_init(l))
  // RMSNorm of A V (the paper's), or (1 - lambda) RMSNorm with attention.diff_head_scale = lambda.
  bool differential = false;
  double diff_lambda = std::numeric_limits<double>::quiet_NaN();
  bool diff_head_norm = false;
  DiffHeadScale diff_head_scale = DiffHeadScale::lambda_init;

  // The first setting that needs the general path, as the key and value that set it (the cpu
  // and opencl platforms' refusal message), or nullptr: everything but plain softmax attention of
  // X W_Q (X W_K)^T / sqrt(d_QK) with nothing between the logits and the softmax needs it. A new
  // setting that the fast and fused paths cannot compute is declared here, once.
  const char* general_path_setting() const {
    if (kind != AttentionKind::softmax) return "attention.kind (not softmax)";
    if (logit_bias.active()) return "attention.logit_bias (not none)";
    if (qk_norm) return "attention.qk_norm = true";
    if (logit_softcap > 0.0) return "attention.logit_softcap > 0";
    if (rope) return "attention.rope = true";
    if (xpos) return "attention.xpos = true";
    if (differential) return "attention.differential = true";
    return nullptr;
  }
  bool needs_general_path() const { return general_path_setting() != nullptr; }
};

struct ModelConfig {
  int tokens = 8;      // N
  int dim = 4;         // d
  int layers = 16;     // L
  int heads = 1;       // H
  // H_kv key/value heads (model.kv_heads; grouped-query attention, docs/science/model-spec.md):
  // query head h reads key/value head h / (H / H_kv). 0 = H (one per query head).
  int kv_heads = 0;
  int kv_group() const { return kv_heads > 0 ? heads / kv_heads : 1; }  // query heads per key/value head
  int key_dim = 0;     // d_k (resolved: default d)
  double d_qk = 0.0;   // temperature (resolved: default d_k)
  // --- Peer dynamics (docs/science/peers.md) ---
  double beta = 0.0;   // inverse temperature 1 / sqrt(d_QK) (resolved; model.beta or model.d_qk)
  HeadMix head_mix = HeadMix::sum;
  int value_dim = 0;   // d_v of W_V,h (d x d_v) and W_O,h (d_v x d); 0 = no output projection, W_V,h d x d
};

// The MLP sub-block (transformer blocks): MLP(X) = act(X W_in + b_in) W_out + b_out; with swiglu
// (SwiGLU) MLP(X) = (silu(X W_in + b_in) .* (X W_gate)) W_out + b_out.
struct MlpConfig {
  int width = 0;  // hidden width m; 0 = no MLP sub-block
  MlpActivation activation = MlpActivation::gelu;
  bool bias = false;  // b_in, b_out (zero unless drawn with a std > 0 or read from weights.file)
};

struct MaskConfig {
  MaskType type = MaskType::complete;
  int window = 1;
  std::string file;
};

struct NormConfig {
  NormType type = kDefaultNormType;
  double eps = kDefaultNormEps;
  double alpha = kDefaultNormAlpha;  // the input scale of dyt and derf
  std::vector<double> gain;  // empty = all ones; else one value (broadcast) or d values
  std::vector<double> bias;  // empty = all zeros; else one value (broadcast) or d values
  NormPosition position = NormPosition::post;  // post: N(X + a A(X)); pre: X + a A(N(X));
                                               // peri: X + a N(A(N(X)))
  bool params_from_file = false;  // norm.params = file: every normalisation's gain and bias per layer
                                  // from weights.file (/norm_attn_gain, ...)
};

// Dropout in training mode (inverted: kept entries scaled by 1/(1-p)); 0 = off.
struct DropoutConfig {
  double attention = 0.0;  // on the attention weights A_h, after the softmax
  double output = 0.0;     // on the attention sub-block's output, before the residual
};

struct WeightSpec {
  WeightType type = WeightType::gaussian;
  double std = 0.0;  // resolved: default 1/sqrt(d)
  Matrix matrix;     // for type fixed
};

struct WeightsConfig {
  WeightSpec q, k, v;
  WeightSpec o;  // W_O (d_v x d), with model.value_dim > 0; std auto = 1/sqrt(d_v)
  // MLP weights (mlp.width > 0): gaussian (stds below), zero or file (/W_in, /b_in, /W_out, /b_out).
  WeightType mlp = WeightType::gaussian;
  double mlp_in_std = 0.0;   // resolved: default 1/sqrt(d)
  double mlp_out_std = 0.0;  // resolved: default 1/sqrt(m)
  double mlp_in_bias_std = 0.0, mlp_out_bias_std = 0.0;
  bool shared = false;
  std::string file;
  // --- Peer dynamics (docs/science/peers.md) ---
  BilinearType qk = BilinearType::none;  // not none: W_Q = B drawn directly, W_K = identity
  double v_sign = 1.0;                   // sign of W_V for weights.v = tied_qk (W_V = sign W_Q W_K^T)
  int redraw_every = 1;                  // fresh weights at layers 0, K, 2K, ...
  bool shared_across_trials = false;     // one weight stream for all trials
  // --- Variants (docs/science/gradients.md) ---
  double branch_gain = 1.0;  // weights.branch_gain: W_V, W_O, W_in, W_out multiplied by it after drawing
};

struct InitConfig {
  InitType type = InitType::gaussian;
  Matrix matrix;
  std::string file;
  double rho = 0.5;  // init.rho: pairwise correlation <x_i, x_j> of init.type = equiangular
  double noise = 0.0;  // init.noise: std of the white noise added to X(0) (kernel/ops/noise.hpp)
};

struct RunConfig {
  int trials = 16;
  std::uint64_t seed = kDefaultSeed;
  int threads = 0;  // 0 = all cores
  Precision precision = Precision::float64;  // float32: the blocks compute in float
  Platform platform = Platform::automatic;   // which implementation of the hot loops runs
};

struct OutputConfig {
  std::string file = "data/run.h5";
  std::string tokens = "none";       // none | final | all | comma list of layers
  std::vector<int> token_layers;     // resolved from `tokens`
  bool spectrum = false;
  std::string schedule = "all";      // all | every:K | log:K | list:a,b,...
  std::vector<int> measure_layers;   // resolved from `schedule`: ascending, always 0 and L
  // --- Peer measures (docs/science/peers.md): extra measures, only when asked (output.measures) ---
  std::vector<std::string> measures;  // subset of peer_measure_names(), in that order
  bool attention = false;             // store the head-averaged attention matrices
};

// metrics.readout: the loss of the gradient measures, L = 1^T X(L) R (all_tokens) or x_N(L) R
// (last_token: the last token's readout alone, as a next-token loss reads it).
enum class Readout { all_tokens, last_token };

// metrics.renyi_distance: the distance of the strong Renyi centres, Euclidean or geodesic (the angle).
enum class RenyiDistance { euclidean, geodesic };

struct MetricsConfig {
  double rank_rtol = -1.0;  // resolved: max(N, d) * machine epsilon
  double rank_atol = 0.0;
  int jacobian_probes = 0;  // jacobian_log_fro2: 0 = exact (N reverse passes), K = Hutchinson, K probes
  Readout readout = Readout::all_tokens;  // metrics.readout (docs/science/gradients.md)
  std::vector<double> readout_vector;     // metrics.readout_vector: R as given (d numbers); empty: R ~ N(0, I_d)
  // jacobian_log_spec2_full: power iteration on J_t^T J_t, at most this many JVPs per layer t,
  // stopping when the Rayleigh quotient's relative change is at most power_tolerance
  int power_iterations = 50;
  double power_tolerance = 1e-10;
  // --- Peer measures (docs/science/peers.md) ---
  double pair_threshold = 0.999;  // pair_density: cos > threshold
  double cluster_tau = 0.999;     // clusters: edges where cos > tau
  RenyiDistance renyi_distance = RenyiDistance::euclidean;  // strong_renyi_centres (kernel/measures/clusters.hpp)
};

// The optional measures of output.measures (docs/science/peers.md), in the order of the measure
// registry, which defines this list (kernel/measures/measure_registry.hpp: optional_measure_names()).
const std::vector<std::string>& peer_measure_names();
// The same joined with " | ": the list of `rcsim --help-keys` and of the validation message.
std::string optional_measure_names_text();

// model.layer_overrides (docs/science/gradients.md, "Settings per layer range"): the settings of
// blocks from..to (0-based, inclusive), resolved by the configuration layer as the whole
// configuration with the range's keys applied (any key declared per_layer, config/keys.cpp); the
// block's parameters are built from it (kernel/block/block.hpp, layer_settings). Blocks outside every
// range use the base settings.
struct ModelSpec;
struct LayerOverride {
  int from = 0, to = 0;
  std::shared_ptr<const ModelSpec> spec;  // the range's configuration
};

// Everything the kernel needs to run trials: the model, its inputs and what is measured.
// config/config.hpp's Config extends it with the key -> text map and the sweep.
struct ModelSpec {
  ModelConfig model;
  MaskConfig mask;
  NormConfig norm;
  double residual_alpha = 0.0;
  // --- Variants (docs/science/gradients.md): X <- a X + alpha F(X), A <- a A + b I - c C ---
  double residual_skip = 1.0;  // a (resolved from residual.skip and residual.mixing)
  // The MLP sub-block's own branch weight and skip gain (residual.mlp_alpha; Cowsik et al.'s
  // alpha_M beside the attention's alpha_A); unset = residual_alpha and residual_skip.
  std::optional<double> residual_mlp_alpha, residual_mlp_skip;
  ResidualMixing residual_mixing = ResidualMixing::none;
  AttentionSettings attention;  // the attention.* settings of every block (kind, shaping, logit bias, ...)
  ResidualDepthScaling residual_depth_scaling = ResidualDepthScaling::none;
  NormDepthScaling norm_depth_scaling = NormDepthScaling::none;
  DropoutConfig dropout;
  MlpConfig mlp;
  std::vector<LayerOverride> layer_overrides;  // model.layer_overrides; empty = every block alike
  // --- Peer dynamics (docs/science/peers.md) ---
  bool attention_bias = false;  // attention.bias: b_Q, b_K, b_V per head and b_O (zero unless read)
  ResidualProject residual_project = ResidualProject::none;
  // --- Particles (docs/science/particles.md) ---
  Integrator integrator = Integrator::euler;  // dynamics.integrator: rk4 = one RK4 step of dt = alpha per layer
  DynamicsSpeed dynamics_speed = DynamicsSpeed::field;  // dynamics.speed: unit = steps of arc length alpha
  double merge_distance = 0.0;  // dynamics.merge_distance: tokens closer than this merged after a step (0: never)
  double dynamics_noise = 0.0;  // dynamics.noise: sigma of the noise after each layer (kernel/ops/noise.hpp)
  WeightsConfig weights;
  InitConfig init;
  RunConfig run;
  OutputConfig output;
  MetricsConfig metrics;
};

// Largest rank the layer output allows: min(N, d - 1) after centring without bias
// (`projection`, or `layernorm` with zero bias), else min(N, d).
int max_rank_after_layer(const ModelSpec& c);

}  // namespace rcsim
