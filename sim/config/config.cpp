#include "config/config.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "config/key_sources.hpp"
#include "config/keys.hpp"
#include "config/names.hpp"
#include "config/values.hpp"
#include "kernel/errors.hpp"
#include "kernel/platform.hpp"
#include "kernel/measure_registry.hpp"
#include "kernel/memory.hpp"
#include "kernel/printable.hpp"

namespace rcsim {

namespace {

// The enum of a choice key's value (validated against its declared choices).
template <class Enum>
Enum read_enum(const KeyValues& v, const std::string& key, const NameTable<Enum>& names) {
  const std::string name = read_choice(v, key);
  for (const auto& [n, value] : names)
    if (n == name) return value;
  throw std::logic_error("choice " + name + " of " + key + " has no enum value");
}

std::vector<double> parse_gain_bias(const std::string& key, const std::string& text, int d,
                                    double neutral) {
  std::vector<double> v = parse_number_list_value(key, text);
  if (v.size() == 1) {
    if (v[0] == neutral) return {};
    return std::vector<double>(static_cast<std::size_t>(d), v[0]);
  }
  if (static_cast<int>(v.size()) != d)
    bad_value(key, text,
              "expected one number or d = " + std::to_string(d) + " numbers, got " +
                  std::to_string(v.size()));
  return v;
}

void check_matrix_shape(const std::string& key, const Matrix& m, Eigen::Index rows,
                        Eigen::Index cols) {
  if (m.rows() != rows || m.cols() != cols)
    throw UsageError("key '" + key + "': inline matrix has shape [" + std::to_string(m.rows()) +
                     ", " + std::to_string(m.cols()) + "], expected [" + std::to_string(rows) +
                     ", " + std::to_string(cols) + "]");
}

// --- Particles (docs/science/particles.md) ---
// dynamics.integrator: rk4 integrates the flow of the attention sub-block alone, with step
// dt = residual.alpha, so it needs a residual, norm.position = post, no MLP and no dropout.
void parse_integrator(std::map<std::string, std::string>& v, Config& c) {
  c.integrator = read_enum(v, "dynamics.integrator", integrator_names());
  if (c.integrator != Integrator::rk4) return;
  const auto refuse = [](const std::string& why) {
    throw UsageError("key 'dynamics.integrator': rk4 needs " + why);
  };
  if (c.residual_alpha == 0.0) refuse("a step size dt = residual.alpha != 0");
  if (c.norm.position != NormPosition::post) refuse("norm.position = post");
  if (c.mlp.width > 0) refuse("mlp.width = 0 (the flow is the attention sub-block alone)");
  if (c.dropout.attention > 0.0 || c.dropout.output > 0.0) refuse("dropout.attention = dropout.output = 0");
}

// dynamics.speed = unit and dynamics.merge_distance (docs/science/particles.md section 6): steps of the
// attention sub-block's Euler step that the reverse and forward-mode passes do not cover. After read_output.
void parse_speed_and_merge(KeyValues& v, Config& c) {
  c.dynamics_speed = read_enum(v, "dynamics.speed", speed_names());
  c.merge_distance = read_number(v, "dynamics.merge_distance");
  const bool unit = c.dynamics_speed == DynamicsSpeed::unit;
  if (!unit && c.merge_distance == 0.0) return;
  const std::string key = unit ? "dynamics.speed" : "dynamics.merge_distance";
  const auto refuse = [&](const std::string& why) {
    throw UsageError("key '" + key + "' = " + v[key] + ": needs " + why);
  };
  if (c.integrator != Integrator::euler) refuse("dynamics.integrator = euler");
  if (c.residual_alpha == 0.0) refuse("a step residual.alpha != 0");
  if (c.norm.position != NormPosition::post) refuse("norm.position = post");
  if (c.mlp.width > 0) refuse("mlp.width = 0 (the flow is the attention sub-block alone)");
  if (c.dropout.attention > 0.0 || c.dropout.output > 0.0) refuse("dropout.attention = dropout.output = 0");
  if (wants_pass(c, MeasurePass::gradients))
    refuse("no gradient or Jacobian measure in output.measures (the reverse pass does not cover it)");
}

// dynamics.noise: X <- P(X + sigma sqrt(dt) G) after each layer, P the normalisation, which must
// be none or sphere after the block (the particle setting).
void parse_dynamics_noise(std::map<std::string, std::string>& v, Config& c) {
  c.dynamics_noise = read_number(v, "dynamics.noise");
  if (!(c.dynamics_noise > 0.0)) return;
  if (c.norm.type != NormType::none && (c.norm.type != NormType::sphere || c.norm.position != NormPosition::post))
    bad_value("dynamics.noise", v["dynamics.noise"], "noise needs norm.type = none, or sphere with norm.position = post");
}

// init.type = circle | equiangular | isometric and init.rho.
void parse_particle_init(std::map<std::string, std::string>& v, Config& c) {
  const int N = c.model.tokens, d = c.model.dim;
  c.init.rho = read_number(v, "init.rho");
  c.init.noise = read_number(v, "init.noise");
  const std::string type = v["init.type"];
  if (c.init.type == InitType::circle && d < 2) bad_value("init.type", type, "circle needs model.dim >= 2");
  if ((c.init.type == InitType::equiangular || c.init.type == InitType::isometric) && N > d)
    bad_value("init.type", type, type + " needs model.tokens <= model.dim (N orthonormal directions)");
  const double lowest = N > 1 ? -1.0 / (N - 1) : -1.0;  // G = (1 - rho) I + rho 1 1^T >= 0
  if (c.init.type == InitType::equiangular && !(c.init.rho >= lowest && c.init.rho <= 1.0))
    bad_value("init.rho", v["init.rho"], "the Gram matrix needs -1/(N-1) <= rho <= 1");
}

// model.*, attention.kind; derived defaults (d_k, d_QK) written out.
void read_model(KeyValues& v, Config& c) {
  c.model.tokens = read_int(v, "model.tokens");
  c.model.dim = read_int(v, "model.dim");
  c.model.layers = read_int(v, "model.layers");
  c.model.heads = read_int(v, "model.heads");
  const int d = c.model.dim;
  c.model.key_dim = is_auto(v, "model.key_dim") ? d : read_int(v, "model.key_dim");
  c.model.d_qk = is_auto(v, "model.d_qk") ? static_cast<double>(c.model.key_dim)
                                           : read_number(v, "model.d_qk");
  // --- Peer dynamics (docs/science/peers.md): model.beta = 1/sqrt(d_QK), one of the two given ---
  if (is_auto(v, "model.beta")) {
    c.model.beta = 1.0 / std::sqrt(c.model.d_qk);
  } else {
    c.model.beta = read_number(v, "model.beta");
    const double d_qk = 1.0 / (c.model.beta * c.model.beta);
    if (!(d_qk > 0.0) || !std::isfinite(d_qk))
      bad_value("model.beta", v["model.beta"], "1/beta^2 must be a finite number > 0");
    if (!is_auto(v, "model.d_qk") && !(std::abs(c.model.d_qk - d_qk) <= 1e-12 * d_qk))
      throw UsageError("keys 'model.beta' = " + v["model.beta"] + " and 'model.d_qk' = " + v["model.d_qk"] +
                       " disagree: beta = 1/sqrt(d_QK); give one of the two");
    if (is_auto(v, "model.d_qk")) c.model.d_qk = d_qk;  // given both: d_QK as given (bitwise re-runs)
  }
  c.model.head_mix = read_enum(v, "model.head_mix", head_mix_names());
  c.model.value_dim = read_int(v, "model.value_dim");
  c.attention_kind = read_enum(v, "attention.kind", attention_names());
  c.attention_bias = read_bool(v, "attention.bias");
  c.usa_normalised = read_bool(v, "attention.usa_normalised");
  if (c.usa_normalised && c.attention_kind != AttentionKind::usa)
    bad_value("attention.usa_normalised", v["attention.usa_normalised"], "needs attention.kind = usa");
  v["model.key_dim"] = std::to_string(c.model.key_dim);
  v["model.d_qk"] = fmt_double(c.model.d_qk);
  // model.beta is another spelling of d_QK: stored as given, or as auto (then d_QK, written out,
  // decides), so that a stored configuration rerun with another --model.d_qk is not a conflict.
  if (!is_auto(v, "model.beta")) v["model.beta"] = fmt_double(c.model.beta);

}

// The mask, the normalisation, the residual and dropout.
void read_block(KeyValues& v, Config& c) {
  const int d = c.model.dim;
  c.mask.type = read_enum(v, "mask.type", mask_names());
  c.mask.window = read_int(v, "mask.window");
  c.mask.file = v["mask.file"];
  if (c.mask.type == MaskType::custom && c.mask.file.empty())
    throw UsageError("key 'mask.file': required when mask.type = custom (an HDF5 file with /mask [N, N])");

  c.norm.type = read_enum(v, "norm.type", norm_names());
  c.norm.eps = read_number(v, "norm.eps");
  c.norm.gain = parse_gain_bias("norm.gain", v["norm.gain"], d, 1.0);
  c.norm.bias = parse_gain_bias("norm.bias", v["norm.bias"], d, 0.0);
  c.residual_alpha = read_number(v, "residual.alpha");
  c.residual_project = read_enum(v, "residual.project", project_names());
  if (c.residual_project == ResidualProject::tangent && c.residual_alpha == 0.0)
    throw UsageError("key 'residual.project': tangent needs a residual (residual.alpha != 0)");
  // Block structure.
  c.norm.position = read_enum(v, "norm.position", norm_position_names());
  for (auto [key, p] : {std::pair{"dropout.attention", &c.dropout.attention},
                        std::pair{"dropout.output", &c.dropout.output}}) {
    *p = read_number(v, key);
  }
  if (c.norm.position != NormPosition::post && c.residual_project == ResidualProject::tangent)
    throw UsageError("key 'norm.position': pre and peri are defined with residual.project = none only "
                     "(the tangent projection is defined for post)");

}

// W_Q, W_K, W_V and W_O (model.value_dim > 0).
void read_attention_weights(KeyValues& v, Config& c) {
  const int d = c.model.dim;
  const double default_std = 1.0 / std::sqrt(static_cast<double>(d));
  // Output projection (model.value_dim = d_v > 0): W_V,h is d x d_v, W_O,h d_v x d.
  const int dv = c.model.value_dim;
  const int v_cols = dv > 0 ? dv : d;
  if (dv == 0 && v["weights.o"] != "gaussian")
    throw UsageError("key 'weights.o' = " + v["weights.o"] + ": an output projection needs model.value_dim > 0");
  // --- Peer dynamics (docs/science/peers.md) ---
  for (const char* w : {"weights.q", "weights.k"})
    if (v[w] == "wishart" || v[w] == "tied_qk")
      bad_value(w, v[w], "wishart and tied_qk are value matrices: allowed for weights.v only");
  struct Slot {
    const char* name;
    WeightSpec* spec;
    int rows, cols;
    double auto_std;
  };
  std::vector<Slot> slots = {Slot{"q", &c.weights.q, d, c.model.key_dim, default_std},
                             Slot{"k", &c.weights.k, d, c.model.key_dim, default_std},
                             Slot{"v", &c.weights.v, d, v_cols, default_std}};
  if (dv > 0) slots.push_back(Slot{"o", &c.weights.o, dv, d, 1.0 / std::sqrt(static_cast<double>(dv))});
  for (const Slot& s : slots) {
    const std::string base = std::string("weights.") + s.name;
    s.spec->type = read_enum(v, base, weight_names());
    const std::string std_key = base + "_std";
    s.spec->std = is_auto(v, std_key) ? s.auto_std : read_number(v, std_key);
    v[std_key] = fmt_double(s.spec->std);
    const std::string mkey = base + "_matrix";
    if (s.spec->type == WeightType::fixed) {
      if (v[mkey].empty())
        throw UsageError("key '" + mkey + "': required when " + base + " = fixed (rows separated by ';')");
      s.spec->matrix = parse_inline_matrix(mkey, v[mkey]);
      check_matrix_shape(mkey, s.spec->matrix, s.rows, s.cols);
    }
    if (dv > 0 && s.name != std::string("q") && s.name != std::string("k")) {
      if (s.spec->type == WeightType::identity && dv != d)
        bad_value(base, v[base], "identity needs model.value_dim = model.dim (got " + std::to_string(dv) + " and " +
                                     std::to_string(d) + ")");
      if (s.spec->type == WeightType::wishart || s.spec->type == WeightType::tied_qk)
        bad_value(base, v[base], "wishart and tied_qk are d x d value maps: not with model.value_dim > 0");
    }
  }
}

// The MLP sub-block and its weights, the integrator, per-layer norms, weight sharing and files.
void read_mlp_and_weight_options(KeyValues& v, Config& c) {
  const int d = c.model.dim;
  // MLP sub-block.
  c.mlp.width = read_int(v, "mlp.width");
  c.mlp.activation = read_enum(v, "mlp.activation", mlp_activation_names());
  c.mlp.bias = read_bool(v, "mlp.bias");
  c.weights.mlp = read_enum(v, "weights.mlp", weight_names());
  c.weights.mlp_in_std = is_auto(v, "weights.mlp_in_std") ? 1.0 / std::sqrt(static_cast<double>(d))
                                                         : read_number(v, "weights.mlp_in_std");
  c.weights.mlp_out_std =
      is_auto(v, "weights.mlp_out_std")
          ? (c.mlp.width > 0 ? 1.0 / std::sqrt(static_cast<double>(c.mlp.width)) : 0.0)
          : read_number(v, "weights.mlp_out_std");
  if (c.mlp.width > 0) {
    v["weights.mlp_in_std"] = fmt_double(c.weights.mlp_in_std);
    v["weights.mlp_out_std"] = fmt_double(c.weights.mlp_out_std);
  }
  c.weights.mlp_in_bias_std = read_number(v, "weights.mlp_in_bias_std");
  c.weights.mlp_out_bias_std = read_number(v, "weights.mlp_out_bias_std");
  if (!c.mlp.bias && (c.weights.mlp_in_bias_std > 0.0 || c.weights.mlp_out_bias_std > 0.0))
    throw UsageError("keys 'weights.mlp_in_bias_std' and 'weights.mlp_out_bias_std': biases need mlp.bias = true");
  if (c.mlp.width > 0 && c.residual_project == ResidualProject::tangent)
    throw UsageError("key 'mlp.width': the MLP sub-block is defined with residual.project = none only");
  parse_integrator(v, c);
  parse_dynamics_noise(v, c);
  // Normalisation parameters per layer from weights.file.
  const std::string params = read_choice(v, "norm.params");
  c.norm.params_from_file = params == "file";
  if (c.norm.params_from_file && c.norm.type != NormType::layernorm && c.norm.type != NormType::rmsnorm)
    bad_value("norm.params", params, "file needs norm.type = layernorm or rmsnorm (the normalisations with a gain)");
  c.weights.shared = read_bool(v, "weights.shared");
  c.weights.qk = read_enum(v, "weights.qk", bilinear_names());
  if (c.weights.qk != BilinearType::none && c.model.key_dim != d)
    throw UsageError("key 'weights.qk': a bilinear form needs model.key_dim = model.dim (got " +
                     std::to_string(c.model.key_dim) + " and " + std::to_string(d) + ")");
  c.weights.v_sign = parse_double("weights.v_sign", v["weights.v_sign"]);
  if (c.weights.v_sign != 1.0 && c.weights.v_sign != -1.0)
    bad_value("weights.v_sign", v["weights.v_sign"], "allowed: " + key_decl("weights.v_sign").allowed());
  c.weights.redraw_every = read_int(v, "weights.redraw_every");
  if (c.weights.shared && c.weights.redraw_every != 1)
    throw UsageError("keys 'weights.shared' and 'weights.redraw_every': give one of the two (shared = never redrawn)");
  c.weights.shared_across_trials = read_choice(v, "weights.across_trials") == "shared";
  c.weights.file = v["weights.file"];
  for (const char* w : {"weights.q", "weights.k", "weights.v", "weights.o", "weights.mlp", "norm.params", "attention.logit_bias"})
    if (v[w] == "file" && c.weights.file.empty())
      throw UsageError(std::string("key 'weights.file': required when ") + w + " = file");

}

// --- Variants (docs/science/gradients.md) ---
// residual.skip and residual.mixing (the skip gain a of X <- a X + alpha F(X)), weights.branch_gain
// and attention.shape_* (A <- a A + b I - c C). Resolved values stay out of the stored text, so a
// stored configuration reruns as given.
void read_variants(KeyValues& v, Config& c) {
  c.residual_mixing = read_enum(v, "residual.mixing", mixing_names());
  const double alpha = c.residual_alpha, L = c.model.layers;
  const bool skip_given = !is_auto(v, "residual.skip"), gain_given = !is_auto(v, "weights.branch_gain");
  const auto refuse = [&](const std::string& why) {
    throw UsageError("key 'residual.mixing' = " + v["residual.mixing"] + ": " + why);
  };
  if (c.residual_mixing != ResidualMixing::none && skip_given)
    refuse("it sets the skip gain; give residual.skip or residual.mixing, not both");
  if (c.residual_mixing != ResidualMixing::none && alpha == 0.0) refuse("needs a residual (residual.alpha != 0)");
  c.residual_skip = skip_given ? read_number(v, "residual.skip") : 1.0;
  if (c.residual_mixing == ResidualMixing::cowsik) {
    if (!(std::abs(alpha) <= 1.0)) refuse("cowsik needs |residual.alpha| <= 1 (a = sqrt(1 - alpha^2))");
    c.residual_skip = std::sqrt(1.0 - alpha * alpha);
  } else if (c.residual_mixing == ResidualMixing::deepnorm) {
    if (c.norm.position != NormPosition::post) refuse("deepnorm is post-LN: needs norm.position = post");
    c.residual_skip = std::pow(2.0 * L, 0.25);
  }
  c.weights.branch_gain = gain_given                                          ? read_number(v, "weights.branch_gain")
                          : c.residual_mixing == ResidualMixing::deepnorm ? std::pow(8.0 * L, -0.25)
                                                                            : 1.0;
  if (c.residual_skip != 1.0) {
    const std::string key = skip_given ? "residual.skip" : "residual.mixing";
    if (alpha == 0.0) throw UsageError("key 'residual.skip': a skip gain needs a residual (residual.alpha != 0)");
    if (c.norm.position == NormPosition::ngpt)
      throw UsageError("key '" + key + "': nGPT's step X + a (N(F(X)) - X) has its own skip weight 1 - a; not with "
                       "norm.position = ngpt");
    if (c.integrator == Integrator::rk4)
      throw UsageError("key '" + key + "': the rk4 step fixes the skip; not with dynamics.integrator = rk4");
  }
  c.attention_shape.a = read_number(v, "attention.shape_a");
  c.attention_shape.b = read_number(v, "attention.shape_b");
  c.attention_shape.c = read_number(v, "attention.shape_c");
}

// residual.mlp_alpha (docs/science/gradients.md): the MLP sub-block's own branch weight alpha_M; its
// skip gain follows residual.mixing as the attention's does (cowsik: sqrt(1 - alpha_M^2)).
void read_mlp_residual(KeyValues& v, Config& c) {
  if (is_auto(v, "residual.mlp_alpha")) return;
  const double a = read_number(v, "residual.mlp_alpha");
  const auto refuse = [&](const std::string& why) {
    throw UsageError("key 'residual.mlp_alpha' = " + v["residual.mlp_alpha"] + ": " + why);
  };
  if (c.mlp.width == 0) refuse("needs an MLP sub-block (mlp.width > 0)");
  c.residual_mlp_alpha = a;
  if (c.residual_mixing == ResidualMixing::cowsik) {
    if (!(std::abs(a) <= 1.0)) refuse("cowsik needs |residual.mlp_alpha| <= 1 (a_M = sqrt(1 - alpha_M^2))");
    c.residual_mlp_skip = std::sqrt(1.0 - a * a);
  } else if (c.residual_skip != 1.0 && a == 0.0) {
    refuse("a skip gain needs a residual (residual.mlp_alpha != 0)");
  }
}

// attention.logit_bias and attention.decay (docs/science/gradients.md): gamma only with decay;
// attention.qk_norm and attention.qk_scale.
void read_logit_bias_and_qk_norm(KeyValues& v, Config& c) {
  c.logit_bias.kind = read_enum(v, "attention.logit_bias", logit_bias_names());
  c.logit_bias.gamma = read_number(v, "attention.decay");
  if (c.logit_bias.gamma != 1.0 && c.logit_bias.kind != LogitBiasKind::decay)
    throw UsageError("key 'attention.decay': needs attention.logit_bias = decay");
  // QK-normalisation: the logits' scale is sqrt(d_k), so a temperature given with it is refused.
  c.qk_norm = read_bool(v, "attention.qk_norm");
  c.qk_scale = read_number(v, "attention.qk_scale");
  c.logit_softcap = read_number(v, "attention.logit_softcap");
  if (!c.qk_norm && c.qk_scale != 1.0) throw UsageError("key 'attention.qk_scale': needs attention.qk_norm = true");
  if (c.qk_norm && c.attention_kind == AttentionKind::random_markov)
    throw UsageError("key 'attention.qk_norm': random_markov attention has no queries and keys");
  if (c.qk_norm && c.model.d_qk != static_cast<double>(c.model.key_dim))  // model.d_qk or model.beta given
    throw UsageError("key 'attention.qk_norm': the logits are scaled by sqrt(d_k); a temperature model.d_qk or "
                     "model.beta other than d_k is not used with it (give model.key_dim, attention.qk_scale)");
}

// residual.depth_scaling (alpha / sqrt(L), applied in layer_params) and norm.depth_scaling (pre-LN
// output times 1/sqrt(l), applied per block by at_layer) (docs/science/gradients.md).
void read_depth_scaling(KeyValues& v, Config& c) {
  c.residual_depth_scaling = read_enum(v, "residual.depth_scaling", residual_depth_scaling_names());
  c.norm_depth_scaling = read_enum(v, "norm.depth_scaling", norm_depth_scaling_names());
  if (c.residual_depth_scaling != ResidualDepthScaling::none) {
    const auto refuse = [&](const std::string& why) {
      throw UsageError("key 'residual.depth_scaling' = " + v["residual.depth_scaling"] + ": " + why);
    };
    if (c.residual_alpha == 0.0) refuse("needs a residual (residual.alpha != 0)");
    if (c.residual_mixing != ResidualMixing::none) refuse("not with residual.mixing (which alpha sets the skip?)");
    if (c.integrator == Integrator::rk4) refuse("not with dynamics.integrator = rk4 (dt = residual.alpha)");
  }
  if (c.norm_depth_scaling != NormDepthScaling::none && c.norm.position != NormPosition::pre)
    throw UsageError("key 'norm.depth_scaling' = " + v["norm.depth_scaling"] +
                     ": LayerNorm scaling scales the pre-LN normalisations; needs norm.position = pre");
}

// X(0) and the run keys.
void read_init_and_run(KeyValues& v, Config& c) {
  const int N = c.model.tokens, d = c.model.dim;
  c.init.type = read_enum(v, "init.type", init_names());
  c.init.file = v["init.file"];
  if (c.init.type == InitType::fixed) {
    if (v["init.matrix"].empty())
      throw UsageError("key 'init.matrix': required when init.type = fixed (rows separated by ';')");
    c.init.matrix = parse_inline_matrix("init.matrix", v["init.matrix"]);
    check_matrix_shape("init.matrix", c.init.matrix, N, d);
  }
  if (c.init.type == InitType::file && c.init.file.empty())
    throw UsageError("key 'init.file': required when init.type = file (an HDF5 file with /X0)");
  parse_particle_init(v, c);

  c.run.trials = read_int(v, "run.trials");
  c.run.seed = parse_seed_value("run.seed", v["run.seed"]);
  c.run.threads = read_int(v, "run.threads");
  c.run.precision = read_enum(v, "run.precision", precision_names());
  c.run.platform = read_enum(v, "run.platform", platform_names());

}

// What is recorded: output.*, metrics.*.
void read_output(KeyValues& v, Config& c) {
  const int N = c.model.tokens, d = c.model.dim, L = c.model.layers;
  c.output.file = v["output.file"];
  if (c.output.file.empty()) bad_value("output.file", "", "expected a file name");
  c.output.tokens = v["output.tokens"];
  // Before the layer lists are built: a run records at least one value per trial and recorded
  // layer, and every snapshot N x d values; refuse what cannot fit (the run's full estimate,
  // run_memory_bytes, is checked again before its results are allocated).
  {
    const double T = c.run.trials, layers = static_cast<double>(L) + 1.0;
    const double recorded = schedule_size_bound(v["output.schedule"], L);
    const double snaps = c.output.tokens == "all" ? layers : c.output.tokens == "none" ? 0.0 : 1.0;
    // Per trial and recorded layer a double, per snapshot N x d doubles (at most the checkpoint's
    // cap and two trials' in memory: kPendingLargeBytes), per layer two int column tables, per
    // recorded layer a set node of the schedule (about 48 bytes).
    const double snapshots = std::min(8.0 * T * snaps * N * d, kPendingLargeBytes + 2 * 8.0 * snaps * N * d);
    require_memory(8.0 * T * recorded + snapshots + 8.0 * layers + 48.0 * recorded,
                   "model.layers = " + std::to_string(L) + " with run.trials = " + v["run.trials"],
                   "record fewer layers (output.schedule = every:K or log:K, output.tokens), or fewer trials");
  }
  if (c.output.tokens == "none") {
  } else if (c.output.tokens == "final") {
    c.output.token_layers = {L};
  } else if (c.output.tokens == "all") {
    for (int t = 0; t <= L; ++t) c.output.token_layers.push_back(t);
  } else {
    std::set<int> layers;
    for (const auto& item : split_list(c.output.tokens)) {
      const long long t = parse_integer("output.tokens", item);
      if (t < 0 || t > L)
        bad_value("output.tokens", item,
                  "layers must lie in 0 .. L = " + std::to_string(L) + " (or use none | final | all)");
      layers.insert(static_cast<int>(t));
    }
    if (layers.empty()) bad_value("output.tokens", c.output.tokens, "none | final | all | comma list of layers");
    c.output.token_layers.assign(layers.begin(), layers.end());
  }
  c.output.spectrum = read_bool(v, "output.spectrum");
  c.output.schedule = v["output.schedule"];
  c.output.measure_layers = parse_schedule(c.output.schedule, L);

  c.metrics.rank_rtol = is_auto(v, "metrics.rank_rtol")
                            ? std::max(N, d) * std::numeric_limits<double>::epsilon()
                            : read_number(v, "metrics.rank_rtol");
  v["metrics.rank_rtol"] = fmt_double(c.metrics.rank_rtol);
  c.metrics.rank_atol = read_number(v, "metrics.rank_atol");
  c.metrics.jacobian_probes = read_int(v, "metrics.jacobian_probes");
  c.metrics.readout = read_enum(v, "metrics.readout", readout_names());
  if (c.metrics.readout == Readout::last_token && c.metrics.jacobian_probes > 0)
    throw UsageError("key 'metrics.jacobian_probes': with metrics.readout = last_token the Jacobian of x_N(L) R has one "
                     "row, computed exactly by one reverse pass; probes are allowed only with metrics.readout = all_tokens "
                     "(set metrics.jacobian_probes = 0)");
  c.metrics.power_iterations = read_int(v, "metrics.power_iterations");
  c.metrics.power_tolerance = read_number(v, "metrics.power_tolerance");
  // --- Peer measures (docs/science/peers.md) ---
  c.output.attention = read_bool(v, "output.attention");
  c.metrics.pair_threshold = read_number(v, "metrics.pair_threshold");
  c.metrics.cluster_tau = read_number(v, "metrics.cluster_tau");
  if (v["output.measures"] != "none") {
    const auto asked = split_list(v["output.measures"]);
    const std::string allowed = "allowed: " + key_decl("output.measures").allowed();
    for (const auto& name : asked)
      if (std::find(peer_measure_names().begin(), peer_measure_names().end(), name) == peer_measure_names().end())
        bad_value("output.measures", name, allowed);
    if (asked.empty()) bad_value("output.measures", v["output.measures"], allowed);
    for (const auto& name : peer_measure_names())
      if (std::find(asked.begin(), asked.end(), name) != asked.end()) c.output.measures.push_back(name);
  }
}

// All keys of `v` read into a Config (v receives the resolved values written out).
Config read_keys(KeyValues& v) {
  Config c;
  read_model(v, c);
  read_block(v, c);
  read_attention_weights(v, c);
  read_mlp_and_weight_options(v, c);
  read_variants(v, c);
  read_mlp_residual(v, c);
  read_logit_bias_and_qk_norm(v, c);
  read_depth_scaling(v, c);
  read_init_and_run(v, c);
  read_output(v, c);
  parse_speed_and_merge(v, c);
  resolved_platform(c);  // run.platform = cpu on a configuration it does not cover: the error, now
  return c;
}

// --- Settings per layer range (docs/science/gradients.md) ---
// model.layer_overrides = FROM-TO:key=value[,key=value...]; ... : each range's settings are the
// whole configuration read again with the range's keys replaced, so that each value is parsed and
// validated by its own key's reader (same messages, same allowed values, same cross-key checks).
const char* const kLayerOverrides = "model.layer_overrides";
const std::vector<std::string>& per_layer_keys() {
  static const std::vector<std::string> keys{"norm.position", "norm.type",  "residual.alpha",
                                             "model.d_qk",    "model.beta", "mlp.activation"};
  return keys;
}
std::string per_layer_keys_text() {
  std::string t;
  for (const auto& k : per_layer_keys()) t += (t.empty() ? "" : ", ") + k;
  return t;
}
[[noreturn]] void bad_layer_entry(const std::string& entry, const std::string& why) {
  throw UsageError(std::string("key '") + kLayerOverrides + "': entry '" + printable(entry) + "': " + why);
}
const std::string kEntryForm =
    "expected FROM-TO:key=value (blocks FROM..TO, 0-based and inclusive; TO omitted: to the last block; FROM "
    "alone: one block; several keys of a range separated by ','; entries separated by ';')";

int block_index(const std::string& entry, const std::string& text, int L) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
    bad_layer_entry(entry, "block index '" + printable(text) + "' is not an integer >= 0; " + kEntryForm);
  const int t = std::stoi(text);
  if (t >= L)
    bad_layer_entry(entry, "block " + text + " is beyond the depth: blocks are 0 .. " + std::to_string(L - 1) +
                               " (model.layers = " + std::to_string(L) + ")");
  return t;
}

void read_layer_overrides(const KeyValues& given, Config& c) {
  const std::string text = trim(given.at(kLayerOverrides));
  if (text == "none") return;
  const int L = c.model.layers;
  std::vector<std::string> entries;
  for (std::size_t b = 0;;) {
    const auto e = text.find(';', b);
    entries.push_back(trim(text.substr(b, e == std::string::npos ? std::string::npos : e - b)));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  for (const std::string& entry : entries) {
    if (entry.empty()) continue;  // a trailing ';'
    const auto colon = entry.find(':');
    if (colon == std::string::npos) bad_layer_entry(entry, "no ':' after the range; " + kEntryForm);
    const std::string range = trim(entry.substr(0, colon));
    const auto dash = range.find('-');
    const int from = block_index(entry, trim(range.substr(0, dash)), L);
    const int to = dash == std::string::npos                ? from
                   : trim(range.substr(dash + 1)).empty() ? L - 1
                                                           : block_index(entry, trim(range.substr(dash + 1)), L);
    if (to < from) bad_layer_entry(entry, "empty range " + range + " (FROM must be <= TO)");
    for (const auto& o : c.layer_overrides)
      if (from <= o.to && o.from <= to)
        bad_layer_entry(entry, "range " + range + " overlaps the range " + std::to_string(o.from) + "-" +
                                   std::to_string(o.to) + " of an earlier entry (ranges must be disjoint)");
    KeyValues alt = given;
    alt[kLayerOverrides] = "none";
    std::set<std::string> seen;
    const std::vector<std::string> assignments = split_list(entry.substr(colon + 1));
    if (assignments.empty()) bad_layer_entry(entry, "no key=value after ':'; " + kEntryForm);
    for (const std::string& a : assignments) {
      const auto eq = a.find('=');
      if (eq == std::string::npos) bad_layer_entry(entry, "'" + printable(a) + "' is not key=value; " + kEntryForm);
      const std::string key = trim(a.substr(0, eq)), value = trim(a.substr(eq + 1));
      if (!is_known_key(key))
        bad_layer_entry(entry, unknown_key_message(key, "") + "; keys allowed per layer: " + per_layer_keys_text());
      if (std::find(per_layer_keys().begin(), per_layer_keys().end(), key) == per_layer_keys().end())
        bad_layer_entry(entry, "key '" + key + "' is not a setting that may differ by layer; keys allowed per layer: " +
                                   per_layer_keys_text());
      if (!seen.insert(key).second) bad_layer_entry(entry, "key '" + key + "' given twice");
      if (value.empty()) bad_layer_entry(entry, "key '" + key + "' has no value");
      alt[key] = value;
    }
    Config r;
    try {
      r = read_keys(alt);
    } catch (const UsageError& e) {
      bad_layer_entry(entry, e.what());
    }
    LayerOverride o;
    o.from = from, o.to = to;
    o.position = r.norm.position;
    o.norm_type = r.norm.type;
    o.residual_alpha = r.residual_alpha;
    o.residual_skip = r.residual_skip;
    o.d_qk = r.model.d_qk;
    o.activation = r.mlp.activation;
    // Settings that the whole stack shares (the weights read, the noise, the time axis).
    if (c.norm.params_from_file && (o.position != c.norm.position || o.norm_type != c.norm.type))
      bad_layer_entry(entry, "norm.params = file reads the normalisations of every layer for one norm.position and "
                             "norm.type; they cannot differ by layer");
    if (c.dynamics_noise > 0.0)
      bad_layer_entry(entry, "not with dynamics.noise > 0 (its projection is the global norm.type)");
    if (c.integrator == Integrator::rk4)
      bad_layer_entry(entry, "not with dynamics.integrator = rk4 (dt = residual.alpha for the whole stack)");
    if (c.residual_project == ResidualProject::tangent && o.residual_alpha != c.residual_alpha)
      bad_layer_entry(entry, "residual.project = tangent stores /time = residual.alpha x layer; residual.alpha cannot "
                             "differ by layer with it");
    c.layer_overrides.push_back(o);
  }
}

}  // namespace

Config make_config(const std::map<std::string, std::string>& overrides) {
  std::map<std::string, std::string> v;
  for (const auto& k : config_keys()) v[k.key] = k.default_value;
  for (const auto& [key, value] : overrides) {
    if (!is_known_key(key))
      throw UsageError(unknown_key_message(key, ""));
    // The stored configuration is INI text, where '#' starts a comment and a line ends the value:
    // such a value would be cut (or add keys) when the run is rerun from its file.
    if (value.find_first_of("#\n\r") != std::string::npos)
      throw UsageError("key '" + key + "' = '" + printable(value) +
                       "': a value cannot contain '#' or a line break (the configuration stored in the output is INI "
                       "text, which would cut it there); rename the file or choose another value");
    v[key] = trim(value);
  }

  const KeyValues given = v;
  Config c = read_keys(v);
  read_layer_overrides(given, c);
  // Keys added after the golden set, at their default, are not part of the resolved text (the
  // stored /config, the sweep definition): default runs and sweeps stay bit for bit as they were.
  for (const auto& k : config_keys())
    if (!k.stored_at_default && v[k.key] == k.default_value) v.erase(k.key);
  c.values = std::move(v);
  return c;
}

std::string Config::to_ini() const {
  std::string out = "# rcsim configuration (fully resolved)\n";
  std::string section;
  // Keys in --help order, grouped by their section.
  for (const auto& k : config_keys()) {
    if (!values.count(k.key)) continue;  // a key not stored at its default
    const auto dot = k.key.find('.');
    const std::string sec = k.key.substr(0, dot);
    if (sec != section) {
      out += "\n[" + sec + "]\n";
      section = sec;
    }
    out += k.key.substr(dot + 1) + " = " + values.at(k.key) + "\n";
  }
  return out;
}

namespace {

// What the key `key`, stored as `auto`, resolves to in `c` ("" if the text says it already).
// Keys resolved into the stored text (model.key_dim, model.d_qk, the weights' stds where they are
// used, ...) never reach here as `auto`; those that do are model.beta (stored as auto so that a
// rerun with another model.d_qk is no conflict) and the stds of weights the model does not have.
std::string auto_resolution(const Config& c, const std::string& key) {
  if (key == "model.beta") return fmt_double(c.model.beta) + " = 1/sqrt(d_qk)";
  if (key == "weights.o_std" && c.model.value_dim == 0) return "unused: no W_O (model.value_dim = 0)";
  if ((key == "weights.mlp_in_std" || key == "weights.mlp_out_std") && c.mlp.width == 0)
    return "unused: no MLP (mlp.width = 0)";
  return "";
}

}  // namespace

std::string Config::to_ini_explained() const {
  std::istringstream in(to_ini());
  std::string out, section;
  for (std::string line; std::getline(in, line);) {
    if (line.size() > 2 && line.front() == '[' && line.back() == ']') section = line.substr(1, line.size() - 2);
    const std::string suffix = " = auto";
    if (line.size() > suffix.size() && line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string note = auto_resolution(*this, section + "." + line.substr(0, line.size() - suffix.size()));
      if (!note.empty()) line += "  # " + note;
    }
    out += line + "\n";
  }
  return out;
}

double schedule_size_bound(const std::string& text, int layers) {
  const std::string t = trim(text);
  const double all = static_cast<double>(layers) + 1.0;
  const auto colon = t.find(':');
  const std::string kind = trim(t.substr(0, colon));
  const std::string arg = colon == std::string::npos ? std::string() : trim(t.substr(colon + 1));
  char* end = nullptr;
  const double k = std::strtod(arg.c_str(), &end);
  if (t == "all") return all;
  if (kind == "every" && k >= 1) return std::min(all, std::floor(layers / k) + 2.0);
  if (kind == "log" && k >= 1) return std::min(all, std::ceil(k * std::log10(std::max(1.0, all))) + 2.0);
  if (kind == "list") return std::min(all, static_cast<double>(std::count(arg.begin(), arg.end(), ',') +
                                                              std::count(arg.begin(), arg.end(), ' ')) + 3.0);
  return 2.0;  // malformed: parse_schedule says so
}

std::vector<int> parse_schedule(const std::string& text, int layers) {
  const std::string key = "output.schedule";
  const std::string allowed = "allowed: all | every:K | log:K (K an integer >= 1) | list:a b c (layers in 0 .. L = " +
                              std::to_string(layers) + ")";
  const std::string t = trim(text);
  std::set<int> out = {0, layers};
  const auto colon = t.find(':');
  const std::string kind = trim(t.substr(0, colon));
  const std::string arg = colon == std::string::npos ? std::string() : trim(t.substr(colon + 1));
  if (t == "all") {
    for (int l = 1; l < layers; ++l) out.insert(l);
  } else if ((kind == "every" || kind == "log") && colon != std::string::npos) {
    const long long k = [&] {
      try {
        return parse_integer(key, arg);
      } catch (const UsageError&) {
        bad_value(key, text, allowed);
      }
    }();
    if (k < 1 || k > std::numeric_limits<int>::max()) bad_value(key, text, allowed);
    if (kind == "every") {
      for (long long l = k; l < layers; l += k) out.insert(static_cast<int>(l));
    } else {
      // K points per decade: round(10^(i/K)), i = 0, 1, ... while <= L. For large K many i
      // give the same layer: skip to the first i that can give the next one, so the loop runs
      // at most once per distinct layer (log:2147483647 no longer loops for minutes).
      const double kd = static_cast<double>(k);
      for (long long i = 0;;) {
        const double l = std::round(std::pow(10.0, static_cast<double>(i) / kd));
        if (l > layers) break;
        out.insert(static_cast<int>(l));
        // round(10^(i/K)) > l needs 10^(i/K) >= l + 0.5, i.e. i >= K log10(l + 0.5).
        const long long next = static_cast<long long>(std::ceil(kd * std::log10(l + 0.5)));
        i = std::max(i + 1, next - 1);  // one step early against rounding in log10
      }
    }
  } else if (kind == "list" && colon != std::string::npos) {
    std::string items = arg;
    std::replace(items.begin(), items.end(), ',', ' ');
    std::istringstream is(items);
    std::string tok;
    int count = 0;
    while (is >> tok) {
      long long l = -1;
      try {
        l = parse_integer(key, tok);
      } catch (const UsageError&) {
        bad_value(key, text, "'" + tok + "' is not an integer; " + allowed);
      }
      if (l < 0 || l > layers) bad_value(key, text, "layer " + tok + " outside 0 .. L = " + std::to_string(layers));
      out.insert(static_cast<int>(l));
      ++count;
    }
    if (count == 0) bad_value(key, text, "list: needs one or more layers; " + allowed);
  } else {
    bad_value(key, text, allowed);
  }
  return {out.begin(), out.end()};
}
ParsedArgs parse_config_sources(const std::vector<std::string>& cli_args,
                                const std::optional<std::string>& config_file,
                                const std::vector<KeyDecl>& command_options, const std::string& args_where) {
  std::vector<KeyDecl> keys = config_keys();
  keys.push_back(sweep_mode_key());
  keys.insert(keys.end(), command_options.begin(), command_options.end());

  ParsedArgs out;
  for (const KeyDecl& k : command_options) out.options[k.key] = k.default_value;
  std::map<std::string, std::vector<std::string>> sweep_axes;
  std::vector<std::string> sweep_order;
  auto absorb = [&](const std::vector<KeyEntry>& entries, const std::string& where) {
    for (const KeyEntry& e : entries) {
      const std::string& key = e.key;
      const std::string& value = e.value;
      if (key == "sweep.mode") {
        const auto& modes = sweep_mode_key().choices;
        if (std::find(modes.begin(), modes.end(), value) == modes.end())
          bad_value("sweep.mode", value, "allowed: " + sweep_mode_key().allowed());
        out.sweep_mode = value;
      } else if (out.options.count(key)) {
        out.options[key] = value;
      } else if (!e.known) {
        if (key.rfind("sweep.", 0) == 0 && is_known_key(key.substr(6))) {
          const std::string axis = key.substr(6);
          auto values = split_list(value);
          if (values.empty()) bad_value(key, value, "expected a comma-separated list of values");
          if (!sweep_axes.count(axis)) sweep_order.push_back(axis);
          sweep_axes[axis] = values;
        } else {
          throw UsageError(unknown_key_message(key, where));
        }
      } else {
        out.values[key] = value;
      }
    }
  };
  if (config_file)
    absorb(read_ini_entries(*config_file, keys), "in configuration file '" + printable(*config_file) + "'");
  // Command line after the file: it overwrites the file's values.
  absorb(read_command_line_entries(cli_args, keys, nullptr, args_where), args_where);
  for (const auto& axis : sweep_order) out.sweep.emplace_back(axis, sweep_axes[axis]);
  return out;
}

}  // namespace rcsim
