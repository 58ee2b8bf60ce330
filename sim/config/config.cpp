#include "config/config.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "config/key_sources.hpp"
#include "config/keys.hpp"
#include "config/key_readers.hpp"
#include "config/layer_overrides.hpp"
#include "config/names.hpp"
#include "config/values.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/trial/platform_table.hpp"
#include "kernel/measures/measure_registry.hpp"
#include "kernel/support/memory.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {

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

void read_model(KeyValues& v, Config& c) {
  c.model.tokens = read_int(v, "model.tokens");
  c.model.dim = read_int(v, "model.dim");
  c.model.layers = read_int(v, "model.layers");
  c.model.heads = read_int(v, "model.heads");
  c.model.kv_heads = is_auto(v, "model.kv_heads") ? c.model.heads : read_int(v, "model.kv_heads");
  if (c.model.heads % c.model.kv_heads != 0)
    bad_value("model.kv_heads", v["model.kv_heads"],
              "must divide model.heads = " + std::to_string(c.model.heads) + " (query head h uses key/value head h / (H / H_kv))");
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
  c.model.value_dim = read_int(v, "model.value_dim");
  if (c.attention.usa_normalised && c.attention.kind != AttentionKind::usa)
    bad_value("attention.usa_normalised", v["attention.usa_normalised"], "needs attention.kind = usa");
  v["model.key_dim"] = std::to_string(c.model.key_dim);
  v["model.d_qk"] = fmt_double(c.model.d_qk);
  // model.beta is another spelling of d_QK: stored as given, or as auto (then d_QK, written out,
  // decides), so that a stored configuration rerun with another --model.d_qk is not a conflict.
  if (!is_auto(v, "model.beta")) v["model.beta"] = fmt_double(c.model.beta);
  // model.beta_log_power = p: beta = model.beta (ln N)^p (Hayase and Karakida; Rigollet), applied after the
  // write-back above, so that the stored configuration keeps the base value and reruns scale it once.
  const double log_power = read_number(v, "model.beta_log_power");
  if (log_power != 0.0) {
    if (c.model.tokens < 2) bad_value("model.beta_log_power", v["model.beta_log_power"], "needs model.tokens >= 2");
    const double scale = std::pow(std::log(static_cast<double>(c.model.tokens)), log_power);
    c.model.beta *= scale;
    c.model.d_qk /= scale * scale;
  }
}

// The mask, the normalisation, the residual and dropout.
void read_block(KeyValues& v, Config& c) {
  const int d = c.model.dim;
  c.mask.type = read_enum(v, "mask.type", mask_names());
  c.mask.window = read_int(v, "mask.window");
  c.mask.file = v["mask.file"];
  if (c.mask.type == MaskType::custom && c.mask.file.empty())
    throw UsageError("key 'mask.file': required when mask.type = custom (an HDF5 file with /mask [N, N])");

  c.norm.gain = parse_gain_bias("norm.gain", v["norm.gain"], d, 1.0);
  c.norm.bias = parse_gain_bias("norm.bias", v["norm.bias"], d, 0.0);
  if (c.residual_project == ResidualProject::tangent && c.residual_alpha == 0.0)
    throw UsageError("key 'residual.project': tangent needs a residual (residual.alpha != 0)");
  // Block structure.
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
  if (c.weights.v.type == WeightType::tied_qk && c.model.kv_group() > 1)  // W_V,h = W_Q,h W_K,h^T is per query head
    bad_value("weights.v", v["weights.v"], "tied_qk needs a key/value head per query head (model.kv_heads = " +
                                               std::to_string(c.model.kv_heads) + ", model.heads = " +
                                               std::to_string(c.model.heads) + ")");
}

// The MLP sub-block and its weights, the integrator, per-layer norms, weight sharing and files.
void read_mlp_and_weight_options(KeyValues& v, Config& c) {
  const int d = c.model.dim;
  // MLP sub-block.
  c.mlp.width = read_int(v, "mlp.width");
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
  if (c.norm.params_from_file && !norm_has_gain(c.norm.type))
    bad_value("norm.params", params, "file needs norm.type = layernorm, rmsnorm, dyt or derf (the normalisations with a gain)");
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
  if (v["metrics.readout_vector"] != "gaussian") {
    c.metrics.readout_vector = parse_number_list_value("metrics.readout_vector", v["metrics.readout_vector"]);
    if (static_cast<int>(c.metrics.readout_vector.size()) != c.model.dim ||
        !std::all_of(c.metrics.readout_vector.begin(), c.metrics.readout_vector.end(),
                     [](double x) { return std::isfinite(x); }))
      bad_value("metrics.readout_vector", v["metrics.readout_vector"],
                "gaussian, or d = model.dim = " + std::to_string(c.model.dim) + " finite numbers");
  }
  c.metrics.power_iterations = read_int(v, "metrics.power_iterations");
  c.metrics.power_tolerance = read_number(v, "metrics.power_tolerance");
  // --- Peer measures (docs/science/peers.md) ---
  c.output.attention = read_bool(v, "output.attention");
  c.metrics.pair_threshold = read_number(v, "metrics.pair_threshold");
  c.metrics.cluster_tau = read_number(v, "metrics.cluster_tau");
  c.metrics.renyi_distance = read_enum(v, "metrics.renyi_distance", renyi_distance_names());
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
  read_declared_keys(v, c);  // the keys whose declaration says how they are read (config/keys.cpp)
  read_model(v, c);
  read_block(v, c);
  read_attention_weights(v, c);
  read_mlp_and_weight_options(v, c);
  read_variants(v, c);
  read_mlp_residual(v, c);
  read_logit_bias(v, c);
  check_declared_keys(c);  // the cross-key checks that the declarations carry (config/keys.cpp)
  read_depth_scaling(v, c);
  read_init_and_run(v, c);
  read_output(v, c);
  check_differential(v, c);
  check_xpos(c);
  check_derived_scales(v, c);
  parse_speed_and_merge(v, c);
  resolved_platform(c);  // run.platform = cpu on a configuration it does not cover: the error, now
  return c;
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
  read_layer_overrides(given, c, read_keys);
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

}  // namespace rcsim
