#include "config/config.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <boost/program_options.hpp>

#include "kernel/errors.hpp"
#include "kernel/memory.hpp"
#include "kernel/printable.hpp"

namespace po = boost::program_options;

namespace rcsim {

namespace {

const std::vector<KeyInfo> kKeys = {
    {"model.tokens", "8", "number of tokens N (rows of X), >= 1"},
    {"model.dim", "4", "token dimension d (columns of X), >= 1"},
    {"model.layers", "16", "depth L (number of attention layers), >= 1"},
    {"model.heads", "1", "number of attention heads H, >= 1 (Y = sum_h A_h X W_V,h)"},
    {"model.key_dim", "auto", "query/key dimension d_k, >= 1 (auto = d)"},
    {"model.d_qk", "auto", "temperature d_QK > 0 in S = XW_Q (XW_K)^T / sqrt(d_QK) (auto = d_k)"},
    // --- Peer dynamics (docs/science/peers.md) ---
    {"model.beta", "auto",
     "inverse temperature beta > 0 = 1/sqrt(d_QK): give model.beta or model.d_qk (both: they must agree)"},
    {"model.head_mix", "sum", "how heads combine: sum (Y = sum_h A_h X W_V,h) | mean (Y = sum_h ... / H)"},
    {"model.value_dim", "0",
     "per-head value width d_v >= 0: W_V,h is d x d_v and head h adds A_h X W_V,h W_O,h (W_O,h d_v x d, "
     "weights.o); 0 = no output projection, W_V,h is d x d"},
    {"attention.kind", "softmax",
     "softmax (rows normalised) | usa (unnormalised: A_ij = exp(beta <x_i W_Q, x_j W_K>) / N on allowed entries) | "
     "hardmax (A_ij = 1/|S_i| on the maximisers S_i of <x_i W_Q, x_j W_K> over the allowed j, ties within a relative "
     "1e-12)"},
    {"mask.type", "complete",
     "attention mask: complete | causal | sliding_window | unidirectional_sliding_window | custom"},
    {"mask.window", "1", "window width w >= 1 of the sliding-window masks"},
    {"mask.file", "", "HDF5 file with dataset /mask [N, N] (nonzero = may attend), for custom"},
    {"norm.type", "none", "row normalisation after attention: none | sphere | layernorm | projection | rmsnorm"},
    {"norm.eps", "1e-5", "epsilon >= 0 of layernorm and rmsnorm"},
    {"norm.gain", "1", "gain g of layernorm/rmsnorm: one number or d numbers"},
    {"norm.bias", "0", "bias b of layernorm: one number or d numbers"},
    {"norm.position", "post",
     "where the normalisation N sits: post (N(X + a A(X)), or N(A(X)) without residual) | pre (X + a A(N(X))) | "
     "peri (X + a N(A(N(X)))) | ngpt (N(X + a (N(A(X)) - X)), nGPT); without residual (a = 0) pre gives A(N(X)) and "
     "peri N(A(N(X)))"},
    {"norm.params", "config",
     "gains and biases of the normalisations: config (norm.gain, norm.bias for every one) | file (each "
     "normalisation of each layer from weights.file: /norm_attn_gain, /norm_attn_bias, /norm_attn_out_*, "
     "/norm_mlp_*, /norm_mlp_out_*; layernorm and rmsnorm only)"},
    {"residual.alpha", "0", "residual weight: Y = X + alpha * attention(X); 0 = no residual"},
    {"residual.project", "none",
     "none | tangent: Y = X + alpha P(attention(X)), P removes from each row its component along x_i"},
    // --- Particles (docs/science/particles.md) ---
    {"dynamics.integrator", "euler",
     "euler (Y = X + alpha F(X), the layer as it is) | rk4 (one classical Runge-Kutta step of size dt = "
     "residual.alpha of the flow dX/dt = F(X), F the attention output, P-projected with residual.project = tangent, "
     "then the normalisation; time t = dt x layer in /time)"},
    {"dropout.attention", "0",
     "dropout probability 0 <= p < 1 on the attention weights (training mode, kept weights scaled by 1/(1-p))"},
    {"dropout.output", "0",
     "dropout probability 0 <= p < 1 on the attention output before the residual (scaled by 1/(1-p)), and on the "
     "MLP output"},
    {"mlp.width", "0",
     "hidden width m >= 0 of the MLP sub-block after attention, MLP(X) = act(X W_in + b_in) W_out + b_out, placed "
     "by norm.position with a normalisation of its own; 0 = no MLP"},
    {"mlp.activation", "gelu",
     "relu | gelu (exact: x Phi(x) = x (1 + erf(x / sqrt 2)) / 2) | gelu_tanh (GPT-2's tanh approximation)"},
    {"mlp.bias", "false", "true: the MLP has biases b_in, b_out (weights.mlp_*_bias_std, or from weights.file)"},
    {"weights.q", "gaussian", "W_Q [d, d_k]: gaussian | orthogonal | identity | zero | fixed | file"},
    {"weights.k", "gaussian", "W_K [d, d_k]: gaussian | orthogonal | identity | zero | fixed | file"},
    {"weights.v", "gaussian",
     "W_V [d, d]: gaussian | orthogonal | identity | zero | fixed | file | wishart (G G^T / sqrt(d)) | tied_qk "
     "(W_V = weights.v_sign * W_Q W_K^T)"},
    {"weights.q_std", "auto", "std >= 0 of gaussian W_Q entries (auto = 1/sqrt(d))"},
    {"weights.k_std", "auto", "std >= 0 of gaussian W_K entries (auto = 1/sqrt(d))"},
    {"weights.v_std", "auto", "std >= 0 of gaussian W_V entries (auto = 1/sqrt(d))"},
    {"weights.q_matrix", "", "inline W_Q for fixed, rows separated by ';' (e.g. 0.5 1; 0 1)"},
    {"weights.k_matrix", "", "inline W_K for fixed"},
    {"weights.v_matrix", "", "inline W_V for fixed"},
    {"weights.o", "gaussian",
     "W_O [d_v, d] (needs model.value_dim > 0): gaussian | orthogonal | identity (d_v = d) | zero | fixed | file"},
    {"weights.o_std", "auto", "std >= 0 of gaussian W_O entries (auto = 1/sqrt(d_v), fan-in as for W_V)"},
    {"weights.o_matrix", "", "inline W_O for fixed"},
    {"weights.mlp", "gaussian",
     "MLP weights W_in [d, m], W_out [m, d] and biases: gaussian (stds below) | zero | file (/W_in, /W_out, "
     "/b_in, /b_out of weights.file)"},
    {"weights.mlp_in_std", "auto", "std >= 0 of gaussian W_in entries (auto = 1/sqrt(d))"},
    {"weights.mlp_out_std", "auto", "std >= 0 of gaussian W_out entries (auto = 1/sqrt(m))"},
    {"weights.mlp_in_bias_std", "0", "std >= 0 of gaussian b_in entries (0 = zero biases)"},
    {"weights.mlp_out_bias_std", "0", "std >= 0 of gaussian b_out entries (0 = zero biases)"},
    {"weights.shared", "false", "true: one draw of the weights shared by all layers; false: fresh per layer"},
    {"weights.file", "",
     "HDF5 file with /W_Q, /W_K, /W_V (and /W_O, the MLP's /W_in, /b_in, /W_out, /b_out, the normalisations' "
     "/norm_*_gain, /norm_*_bias) for type file"},
    {"weights.qk", "none",
     "bilinear form B = W_Q W_K^T drawn directly (W_Q = B, W_K = I; needs d_k = d): none (use weights.q, "
     "weights.k) | gaussian_product (G1 G2 / sqrt(d)) | symmetric ((G + G^T) / sqrt(2)) | goe "
     "((G + G^T) / sqrt(2 d)) | wigner (symmetric, every entry N(0, 1)) | identity"},
    {"weights.v_sign", "1", "sign s = 1 | -1 of weights.v = tied_qk (W_V = s W_Q W_K^T)"},
    {"weights.redraw_every", "1", "K >= 1: fresh weights at layers 0, K, 2K, ... (kept in between)"},
    {"weights.across_trials", "independent",
     "independent (each trial draws its weights) | shared (one weight draw, from a stream of its own, for all trials)"},
    {"init.type", "gaussian", "X(0): gaussian | sphere (uniform on the unit sphere) | positive | fixed | file | uniform (entries uniform on "
     "(-1, 1)) | circle (theta_j = 2 pi j / N in the first two coordinates) | equiangular (unit tokens, <x_i, x_j> = "
     "init.rho; N <= d) | isometric (X X^T = I; N <= d)"},
    {"init.matrix", "", "inline X(0) [N, d] for fixed, rows separated by ';'"},
    {"init.file", "", "HDF5 file with /X0 [N, d] or [trials, N, d] for type file"},
    {"init.rho", "0.5", "pairwise correlation <x_i, x_j> of init.type = equiangular, -1/(N-1) <= rho <= 1"},
    {"run.trials", "16", "number of independent trials, >= 1"},
    {"run.seed", "20240527", "seed (unsigned 64-bit); trial t uses a stream that depends only on (seed, t)"},
    {"run.threads", "0", "worker threads, >= 0 (0 = all cores); results do not depend on it"},
    {"run.precision", "float64",
     "float64 | float32: float32 computes every block in single precision (matrix products, softmax, "
     "normalisations, MLP; weights and X(0) rounded to float) and the measures in float64 from the float tokens"},
    {"output.file", "data/run.h5", "output HDF5 file (written to an exclusive temporary .NAME.XXXXXX.tmp, renamed when complete)"},
    {"output.tokens", "none", "token snapshots: none | final | all | comma list of layers"},
    {"output.spectrum", "false", "store the whole singular spectrum per layer"},
    {"output.schedule", "all",
     "layers at which measures are computed and stored (always 0 and L): all | every:K (multiples of K) | "
     "log:K (K log-spaced layers per decade) | list:a b c (layers, spaces or commas)"},
    {"output.measures", "none",
     "extra measures (comma list, or none): pair_density | clusters | dong_residual | dong_residual_rel | "
     "effective_rank (of X) | "
     "attn_rank | ergodicity (of the head-averaged attention matrix and of its products over layers) | "
     "cos_mean | gram_q | gram_p | massive_ratio | update_size | grad_x_norm | grad_wq_norm | grad_wk_norm | "
     "grad_wv_norm | jacobian_log_fro2 (signal propagation: docs/science/gradients.md) | "
     "energy ((1/(2 beta N^2)) sum_ij exp(beta (<x_i, x_j> - 1))) | clusters_90 | clusters_99 | clusters_999 (clusters at "
     "cos > 0.9, 0.99, 0.999) | fourier_mode (d = 2: max_k=1..4 |mean_j exp(i k theta_j)|)"},
    {"output.attention", "false",
     "store the head-averaged attention matrix (1/H) sum_h A_h of every recorded attention layer in /attention"},
    {"metrics.rank_rtol", "auto", "relative rank tolerance >= 0 (auto = max(N, d) * machine epsilon)"},
    {"metrics.rank_atol", "0", "absolute rank tolerance >= 0; tol = max(atol, rtol * sigma_max)"},
    // --- Peer measures (docs/science/peers.md) ---
    {"metrics.pair_threshold", "0.999", "pair_density counts ordered pairs i != j with cos(x_i, x_j) > threshold"},
    {"metrics.cluster_tau", "0.999", "clusters: connected components of the graph cos(x_i, x_j) > tau"},
};

// Keys kept in Config::values (so in to_ini and the sweep definition) only when their value is
// not the default: keys added after the golden set (tests/golden/) was recorded, so that a
// default run's /config text and a default sweep's definition stay as they were.
const std::set<std::string> kOmittedAtDefault = {"dynamics.integrator", "init.rho"};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string fmt_double(double x) {
  std::ostringstream os;
  os.precision(17);
  os << x;
  return os.str();
}

[[noreturn]] void bad_value(const std::string& key, const std::string& value,
                            const std::string& allowed) {
  throw UsageError("invalid value '" + printable(value) + "' for key '" + printable(key) + "': " + allowed);
}

double parse_double(const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) bad_value(key, text, "expected a number");
  // A fraction a/b of two numbers (d_QK = 1/64 as in the paper) is accepted too.
  const auto slash = t.find('/');
  if (slash != std::string::npos) {
    const std::string what = "expected a finite number or a fraction a/b";
    if (t.find('/', slash + 1) != std::string::npos) bad_value(key, text, what);
    auto part = [&](const std::string& p) {
      char* end = nullptr;
      errno = 0;
      const double x = std::strtod(p.c_str(), &end);
      if (p.empty() || end != p.c_str() + p.size() || !std::isfinite(x) || errno == ERANGE) bad_value(key, text, what);
      return x;
    };
    const double num = part(trim(t.substr(0, slash))), den = part(trim(t.substr(slash + 1)));
    const double x = num / den;
    if (den == 0 || !std::isfinite(x)) bad_value(key, text, what + " with a nonzero denominator");
    return x;
  }
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(x) || errno == ERANGE)
    bad_value(key, text, "expected a finite number");
  return x;
}

// "unknown key ..." with the nearest known key when one is close (edit distance <= 3, or the
// same name in another section): "did you mean 'model.dim'?".
std::string unknown_key_message(const std::string& key, const std::string& where) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  auto leaf = [](const std::string& k) { return k.substr(k.find('.') + 1); };
  std::string best;
  std::size_t best_d = 4;
  for (const auto& k : kKeys) {
    if (key.size() > 64) break;  // no suggestion for a long key (the distance is quadratic)
    const std::size_t d = leaf(k.key) == leaf(key) ? 1 : distance(k.key, key);
    if (d < best_d) best_d = d, best = k.key;
  }
  return "unknown key '" + printable(key) + "'" + (where.empty() ? "" : " " + where) +
         (best.empty() ? "" : " (did you mean '" + best + "'?)") + "; 'rcsim --help-keys' lists every key";
}

long long parse_integer(const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) bad_value(key, text, "expected an integer");
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(t.c_str(), &end, 10);
  if (end != t.c_str() + t.size() || errno == ERANGE) bad_value(key, text, "expected an integer");
  return x;
}

int parse_int_min(const std::string& key, const std::string& text, int min) {
  const long long x = parse_integer(key, text);
  if (x < min || x > std::numeric_limits<int>::max())
    bad_value(key, text, "expected an integer >= " + std::to_string(min));
  return static_cast<int>(x);
}

double parse_double_min(const std::string& key, const std::string& text, double min,
                        bool strict) {
  const double x = parse_double(key, text);
  if (strict ? !(x > min) : !(x >= min))
    bad_value(key, text, std::string("expected a number ") + (strict ? "> " : ">= ") + fmt_double(min));
  return x;
}

bool parse_bool(const std::string& key, const std::string& text) {
  std::string t = trim(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  bad_value(key, text, "expected true or false");
}

template <class Enum>
Enum parse_enum(const std::string& key, const std::string& text,
                const std::vector<std::pair<std::string, Enum>>& names) {
  const std::string t = trim(text);
  std::string allowed;
  for (const auto& [name, value] : names) {
    if (t == name) return value;
    allowed += (allowed.empty() ? "" : " | ") + name;
  }
  bad_value(key, text, "allowed: " + allowed);
}

const std::vector<std::pair<std::string, MaskType>> kMaskNames = {
    {"complete", MaskType::complete},
    {"causal", MaskType::causal},
    {"sliding_window", MaskType::sliding_window},
    {"unidirectional_sliding_window", MaskType::unidirectional_sliding_window},
    {"custom", MaskType::custom}};
const std::vector<std::pair<std::string, NormType>> kNormNames = {
    {"none", NormType::none},
    {"sphere", NormType::sphere},
    {"layernorm", NormType::layernorm},
    {"projection", NormType::projection},
    {"rmsnorm", NormType::rmsnorm}};
const std::vector<std::pair<std::string, NormPosition>> kNormPositionNames = {
    {"post", NormPosition::post}, {"pre", NormPosition::pre}, {"peri", NormPosition::peri}, {"ngpt", NormPosition::ngpt}};
const std::vector<std::pair<std::string, Precision>> kPrecisionNames = {
    {"float64", Precision::float64}, {"float32", Precision::float32}};
const std::vector<std::pair<std::string, MlpActivation>> kMlpActivationNames = {
    {"relu", MlpActivation::relu}, {"gelu", MlpActivation::gelu}, {"gelu_tanh", MlpActivation::gelu_tanh}};

const std::vector<std::pair<std::string, WeightType>> kWeightNames = {
    {"gaussian", WeightType::gaussian}, {"orthogonal", WeightType::orthogonal},
    {"identity", WeightType::identity}, {"zero", WeightType::zero},
    {"fixed", WeightType::fixed},       {"file", WeightType::file},
    {"wishart", WeightType::wishart},   {"tied_qk", WeightType::tied_qk}};
const std::vector<std::pair<std::string, InitType>> kInitNames = {
    {"gaussian", InitType::gaussian}, {"sphere", InitType::sphere},
    {"positive", InitType::positive}, {"fixed", InitType::fixed},
    {"file", InitType::file},         {"uniform", InitType::uniform},
    {"circle", InitType::circle},     {"equiangular", InitType::equiangular},
    {"isometric", InitType::isometric}};
// --- Peer dynamics (docs/science/peers.md) ---
const std::vector<std::pair<std::string, AttentionKind>> kAttentionNames = {{"softmax", AttentionKind::softmax},
                                                                           {"usa", AttentionKind::usa},
                                                                           {"hardmax", AttentionKind::hardmax}};
const std::vector<std::pair<std::string, Integrator>> kIntegratorNames = {{"euler", Integrator::euler},
                                                                         {"rk4", Integrator::rk4}};
const std::vector<std::pair<std::string, HeadMix>> kHeadMixNames = {{"sum", HeadMix::sum}, {"mean", HeadMix::mean}};
const std::vector<std::pair<std::string, ResidualProject>> kProjectNames = {{"none", ResidualProject::none},
                                                                           {"tangent", ResidualProject::tangent}};
const std::vector<std::pair<std::string, BilinearType>> kBilinearNames = {
    {"none", BilinearType::none},         {"gaussian_product", BilinearType::gaussian_product},
    {"symmetric", BilinearType::symmetric}, {"goe", BilinearType::goe},
    {"wigner", BilinearType::wigner},     {"identity", BilinearType::identity}};

template <class Enum>
std::string enum_name(Enum e, const std::vector<std::pair<std::string, Enum>>& names) {
  for (const auto& [name, value] : names)
    if (value == e) return name;
  return "?";
}

// Numbers separated by commas and/or white space.
std::vector<double> parse_number_list(const std::string& key, const std::string& text) {
  std::string t = text;
  std::replace(t.begin(), t.end(), ',', ' ');
  std::istringstream is(t);
  std::vector<double> out;
  std::string tok;
  while (is >> tok) out.push_back(parse_double(key, tok));
  if (out.empty()) bad_value(key, text, "expected one or more numbers");
  return out;
}

std::vector<double> parse_gain_bias(const std::string& key, const std::string& text, int d,
                                    double neutral) {
  std::vector<double> v = parse_number_list(key, text);
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

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream is(text);
  while (std::getline(is, item, ',')) {
    item = trim(item);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool is_known_key(const std::string& key) {
  return std::any_of(kKeys.begin(), kKeys.end(), [&](const KeyInfo& k) { return k.key == key; });
}

// --- Particles (docs/science/particles.md) ---
// dynamics.integrator: rk4 integrates the flow of the attention sub-block alone, with step
// dt = residual.alpha, so it needs a residual, norm.position = post, no MLP and no dropout.
void parse_integrator(std::map<std::string, std::string>& v, Config& c) {
  c.integrator = parse_enum("dynamics.integrator", v["dynamics.integrator"], kIntegratorNames);
  if (c.integrator != Integrator::rk4) return;
  const auto refuse = [](const std::string& why) {
    throw UsageError("key 'dynamics.integrator': rk4 needs " + why);
  };
  if (c.residual_alpha == 0.0) refuse("a step size dt = residual.alpha != 0");
  if (c.norm.position != NormPosition::post) refuse("norm.position = post");
  if (c.mlp.width > 0) refuse("mlp.width = 0 (the flow is the attention sub-block alone)");
  if (c.dropout.attention > 0.0 || c.dropout.output > 0.0) refuse("dropout.attention = dropout.output = 0");
}

// init.type = circle | equiangular | isometric and init.rho.
void parse_particle_init(std::map<std::string, std::string>& v, Config& c) {
  const int N = c.model.tokens, d = c.model.dim;
  c.init.rho = parse_double("init.rho", v["init.rho"]);
  const std::string type = v["init.type"];
  if (c.init.type == InitType::circle && d < 2) bad_value("init.type", type, "circle needs model.dim >= 2");
  if ((c.init.type == InitType::equiangular || c.init.type == InitType::isometric) && N > d)
    bad_value("init.type", type, type + " needs model.tokens <= model.dim (N orthonormal directions)");
  const double lowest = N > 1 ? -1.0 / (N - 1) : -1.0;  // G = (1 - rho) I + rho 1 1^T >= 0
  if (c.init.type == InitType::equiangular && !(c.init.rho >= lowest && c.init.rho <= 1.0))
    bad_value("init.rho", v["init.rho"], "the Gram matrix needs -1/(N-1) <= rho <= 1");
}

}  // namespace

const std::vector<KeyInfo>& config_keys() { return kKeys; }


std::string to_string(MaskType t) { return enum_name(t, kMaskNames); }
std::string to_string(NormType t) { return enum_name(t, kNormNames); }
std::string to_string(NormPosition p) { return enum_name(p, kNormPositionNames); }
std::string to_string(Precision p) { return enum_name(p, kPrecisionNames); }
std::string to_string(MlpActivation a) { return enum_name(a, kMlpActivationNames); }
std::string to_string(WeightType t) { return enum_name(t, kWeightNames); }
std::string to_string(InitType t) { return enum_name(t, kInitNames); }
std::string to_string(BilinearType t) { return enum_name(t, kBilinearNames); }

Matrix parse_inline_matrix(const std::string& key, const std::string& text) {
  std::vector<std::vector<double>> rows;
  std::string row;
  std::istringstream is(text);
  while (std::getline(is, row, ';')) {
    if (trim(row).empty()) continue;
    std::string r = row;
    std::replace(r.begin(), r.end(), ',', ' ');
    std::istringstream rs(r);
    std::vector<double> values;
    std::string tok;
    while (rs >> tok) {
      char* end = nullptr;
      const double x = std::strtod(tok.c_str(), &end);
      if (end != tok.c_str() + tok.size() || !std::isfinite(x))
        throw UsageError("key '" + key + "': '" + tok +
                         "' is not a finite number (inline matrix rows are separated by ';', "
                         "entries by spaces, e.g. '0.5 1; 0 1')");
      values.push_back(x);
    }
    rows.push_back(std::move(values));
  }
  if (rows.empty()) throw UsageError("key '" + key + "': empty inline matrix");
  const std::size_t cols = rows.front().size();
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].size() != cols)
      throw UsageError("key '" + key + "': row " + std::to_string(i) + " of the inline matrix has " +
                       std::to_string(rows[i].size()) + " entries, row 0 has " +
                       std::to_string(cols));
  Matrix m(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(cols));
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = 0; j < cols; ++j)
      m(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = rows[i][j];
  return m;
}

Config make_config(const std::map<std::string, std::string>& overrides) {
  std::map<std::string, std::string> v;
  for (const auto& k : kKeys) v[k.key] = k.default_value;
  for (const auto& [key, value] : overrides) {
    if (!is_known_key(key))
      throw UsageError(unknown_key_message(key, ""));
    v[key] = trim(value);
  }

  Config c;
  c.model.tokens = parse_int_min("model.tokens", v["model.tokens"], 1);
  c.model.dim = parse_int_min("model.dim", v["model.dim"], 1);
  c.model.layers = parse_int_min("model.layers", v["model.layers"], 1);
  c.model.heads = parse_int_min("model.heads", v["model.heads"], 1);
  const int N = c.model.tokens, d = c.model.dim;
  c.model.key_dim = v["model.key_dim"] == "auto" ? d : parse_int_min("model.key_dim", v["model.key_dim"], 1);
  c.model.d_qk = v["model.d_qk"] == "auto" ? static_cast<double>(c.model.key_dim)
                                           : parse_double_min("model.d_qk", v["model.d_qk"], 0.0, true);
  // --- Peer dynamics (docs/science/peers.md): model.beta = 1/sqrt(d_QK), one of the two given ---
  if (v["model.beta"] == "auto") {
    c.model.beta = 1.0 / std::sqrt(c.model.d_qk);
  } else {
    c.model.beta = parse_double_min("model.beta", v["model.beta"], 0.0, true);
    const double d_qk = 1.0 / (c.model.beta * c.model.beta);
    if (!(d_qk > 0.0) || !std::isfinite(d_qk))
      bad_value("model.beta", v["model.beta"], "1/beta^2 must be a finite number > 0");
    if (v["model.d_qk"] != "auto" && !(std::abs(c.model.d_qk - d_qk) <= 1e-12 * d_qk))
      throw UsageError("keys 'model.beta' = " + v["model.beta"] + " and 'model.d_qk' = " + v["model.d_qk"] +
                       " disagree: beta = 1/sqrt(d_QK); give one of the two");
    if (v["model.d_qk"] == "auto") c.model.d_qk = d_qk;  // given both: d_QK as given (bitwise re-runs)
  }
  c.model.head_mix = parse_enum("model.head_mix", v["model.head_mix"], kHeadMixNames);
  c.model.value_dim = parse_int_min("model.value_dim", v["model.value_dim"], 0);
  c.attention_kind = parse_enum("attention.kind", v["attention.kind"], kAttentionNames);
  v["model.key_dim"] = std::to_string(c.model.key_dim);
  v["model.d_qk"] = fmt_double(c.model.d_qk);
  // model.beta is another spelling of d_QK: stored as given, or as auto (then d_QK, written out,
  // decides), so that a stored configuration rerun with another --model.d_qk is not a conflict.
  if (v["model.beta"] != "auto") v["model.beta"] = fmt_double(c.model.beta);

  c.mask.type = parse_enum("mask.type", v["mask.type"], kMaskNames);
  c.mask.window = parse_int_min("mask.window", v["mask.window"], 1);
  c.mask.file = v["mask.file"];
  if (c.mask.type == MaskType::custom && c.mask.file.empty())
    throw UsageError("key 'mask.file': required when mask.type = custom (an HDF5 file with /mask [N, N])");

  c.norm.type = parse_enum("norm.type", v["norm.type"], kNormNames);
  c.norm.eps = parse_double_min("norm.eps", v["norm.eps"], 0.0, false);
  c.norm.gain = parse_gain_bias("norm.gain", v["norm.gain"], d, 1.0);
  c.norm.bias = parse_gain_bias("norm.bias", v["norm.bias"], d, 0.0);
  c.residual_alpha = parse_double("residual.alpha", v["residual.alpha"]);
  c.residual_project = parse_enum("residual.project", v["residual.project"], kProjectNames);
  if (c.residual_project == ResidualProject::tangent && c.residual_alpha == 0.0)
    throw UsageError("key 'residual.project': tangent needs a residual (residual.alpha != 0)");
  // Block structure.
  c.norm.position = parse_enum("norm.position", v["norm.position"], kNormPositionNames);
  for (auto [key, p] : {std::pair{"dropout.attention", &c.dropout.attention},
                        std::pair{"dropout.output", &c.dropout.output}}) {
    *p = parse_double_min(key, v[key], 0.0, false);
    if (!(*p < 1.0)) bad_value(key, v[key], "a probability 0 <= p < 1");
  }
  if (c.norm.position != NormPosition::post && c.residual_project == ResidualProject::tangent)
    throw UsageError("key 'norm.position': pre and peri are defined with residual.project = none only "
                     "(the tangent projection is defined for post)");

  const double default_std = 1.0 / std::sqrt(static_cast<double>(d));
  // Output projection (model.value_dim = d_v > 0): W_V,h is d x d_v, W_O,h d_v x d.
  const int dv = c.model.value_dim;
  const int v_cols = dv > 0 ? dv : d;
  if (dv == 0 && v["weights.o"] != "gaussian")
    throw UsageError("key 'weights.o' = " + v["weights.o"] + ": an output projection needs model.value_dim > 0");
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
    s.spec->type = parse_enum(base, v[base], kWeightNames);
    const std::string std_key = base + "_std";
    s.spec->std = v[std_key] == "auto" ? s.auto_std : parse_double_min(std_key, v[std_key], 0.0, false);
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
  // MLP sub-block.
  c.mlp.width = parse_int_min("mlp.width", v["mlp.width"], 0);
  c.mlp.activation = parse_enum("mlp.activation", v["mlp.activation"], kMlpActivationNames);
  c.mlp.bias = parse_bool("mlp.bias", v["mlp.bias"]);
  c.weights.mlp = parse_enum("weights.mlp", v["weights.mlp"], kWeightNames);
  if (c.weights.mlp != WeightType::gaussian && c.weights.mlp != WeightType::zero && c.weights.mlp != WeightType::file)
    bad_value("weights.mlp", v["weights.mlp"], "allowed: gaussian | zero | file");
  c.weights.mlp_in_std = v["weights.mlp_in_std"] == "auto"
                             ? default_std
                             : parse_double_min("weights.mlp_in_std", v["weights.mlp_in_std"], 0.0, false);
  c.weights.mlp_out_std =
      v["weights.mlp_out_std"] == "auto"
          ? (c.mlp.width > 0 ? 1.0 / std::sqrt(static_cast<double>(c.mlp.width)) : 0.0)
          : parse_double_min("weights.mlp_out_std", v["weights.mlp_out_std"], 0.0, false);
  if (c.mlp.width > 0) {
    v["weights.mlp_in_std"] = fmt_double(c.weights.mlp_in_std);
    v["weights.mlp_out_std"] = fmt_double(c.weights.mlp_out_std);
  }
  c.weights.mlp_in_bias_std = parse_double_min("weights.mlp_in_bias_std", v["weights.mlp_in_bias_std"], 0.0, false);
  c.weights.mlp_out_bias_std = parse_double_min("weights.mlp_out_bias_std", v["weights.mlp_out_bias_std"], 0.0, false);
  if (!c.mlp.bias && (c.weights.mlp_in_bias_std > 0.0 || c.weights.mlp_out_bias_std > 0.0))
    throw UsageError("keys 'weights.mlp_in_bias_std' and 'weights.mlp_out_bias_std': biases need mlp.bias = true");
  if (c.mlp.width > 0 && c.residual_project == ResidualProject::tangent)
    throw UsageError("key 'mlp.width': the MLP sub-block is defined with residual.project = none only");
  parse_integrator(v, c);
  // Normalisation parameters per layer from weights.file.
  const std::string params = trim(v["norm.params"]);
  if (params != "config" && params != "file") bad_value("norm.params", params, "allowed: config | file");
  c.norm.params_from_file = params == "file";
  if (c.norm.params_from_file && c.norm.type != NormType::layernorm && c.norm.type != NormType::rmsnorm)
    bad_value("norm.params", params, "file needs norm.type = layernorm or rmsnorm (the normalisations with a gain)");
  c.weights.shared = parse_bool("weights.shared", v["weights.shared"]);
  // --- Peer dynamics (docs/science/peers.md) ---
  for (const char* w : {"weights.q", "weights.k"})
    if (v[w] == "wishart" || v[w] == "tied_qk")
      bad_value(w, v[w], "wishart and tied_qk are value matrices: allowed for weights.v only");
  c.weights.qk = parse_enum("weights.qk", v["weights.qk"], kBilinearNames);
  if (c.weights.qk != BilinearType::none && c.model.key_dim != d)
    throw UsageError("key 'weights.qk': a bilinear form needs model.key_dim = model.dim (got " +
                     std::to_string(c.model.key_dim) + " and " + std::to_string(d) + ")");
  c.weights.v_sign = parse_double("weights.v_sign", v["weights.v_sign"]);
  if (c.weights.v_sign != 1.0 && c.weights.v_sign != -1.0) bad_value("weights.v_sign", v["weights.v_sign"], "allowed: 1 | -1");
  c.weights.redraw_every = parse_int_min("weights.redraw_every", v["weights.redraw_every"], 1);
  if (c.weights.shared && c.weights.redraw_every != 1)
    throw UsageError("keys 'weights.shared' and 'weights.redraw_every': give one of the two (shared = never redrawn)");
  const std::string across = trim(v["weights.across_trials"]);
  if (across != "independent" && across != "shared")
    bad_value("weights.across_trials", across, "allowed: independent | shared");
  c.weights.shared_across_trials = across == "shared";
  c.weights.file = v["weights.file"];
  for (const char* w : {"weights.q", "weights.k", "weights.v", "weights.o", "weights.mlp", "norm.params"})
    if (v[w] == "file" && c.weights.file.empty())
      throw UsageError(std::string("key 'weights.file': required when ") + w + " = file");

  c.init.type = parse_enum("init.type", v["init.type"], kInitNames);
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

  c.run.trials = parse_int_min("run.trials", v["run.trials"], 1);
  c.run.seed = parse_seed_value("run.seed", v["run.seed"]);
  c.run.threads = parse_int_min("run.threads", v["run.threads"], 0);
  c.run.precision = parse_enum("run.precision", v["run.precision"], kPrecisionNames);

  c.output.file = v["output.file"];
  if (c.output.file.empty()) bad_value("output.file", "", "expected a file name");
  c.output.tokens = v["output.tokens"];
  const int L = c.model.layers;
  // Before the layer lists are built: a run records at least one value per trial and recorded
  // layer, and every snapshot N x d values; refuse what cannot fit (the run's full estimate,
  // run_memory_bytes, is checked again before its results are allocated).
  {
    const double T = c.run.trials, layers = static_cast<double>(L) + 1.0;
    const double recorded = schedule_size_bound(v["output.schedule"], L);
    const double snaps = c.output.tokens == "all" ? layers : c.output.tokens == "none" ? 0.0 : 1.0;
    // Per trial and recorded layer a double, per snapshot N x d doubles, per layer two int
    // column tables, per recorded layer a set node of the schedule (about 48 bytes).
    require_memory(8.0 * T * (recorded + snaps * N * d) + 8.0 * layers + 48.0 * recorded,
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
  c.output.spectrum = parse_bool("output.spectrum", v["output.spectrum"]);
  c.output.schedule = v["output.schedule"];
  c.output.measure_layers = parse_schedule(c.output.schedule, L);

  c.metrics.rank_rtol = v["metrics.rank_rtol"] == "auto"
                            ? std::max(N, d) * std::numeric_limits<double>::epsilon()
                            : parse_double_min("metrics.rank_rtol", v["metrics.rank_rtol"], 0.0, false);
  v["metrics.rank_rtol"] = fmt_double(c.metrics.rank_rtol);
  c.metrics.rank_atol = parse_double_min("metrics.rank_atol", v["metrics.rank_atol"], 0.0, false);
  // --- Peer measures (docs/science/peers.md) ---
  c.output.attention = parse_bool("output.attention", v["output.attention"]);
  c.metrics.pair_threshold = parse_double("metrics.pair_threshold", v["metrics.pair_threshold"]);
  c.metrics.cluster_tau = parse_double("metrics.cluster_tau", v["metrics.cluster_tau"]);
  if (v["output.measures"] != "none") {
    const auto asked = split_list(v["output.measures"]);
    std::string allowed;
    for (const auto& name : peer_measure_names()) allowed += (allowed.empty() ? "" : " | ") + name;
    for (const auto& name : asked)
      if (std::find(peer_measure_names().begin(), peer_measure_names().end(), name) == peer_measure_names().end())
        bad_value("output.measures", name, "allowed: none or a comma list of " + allowed);
    if (asked.empty()) bad_value("output.measures", v["output.measures"], "allowed: none or a comma list of " + allowed);
    for (const auto& name : peer_measure_names())
      if (std::find(asked.begin(), asked.end(), name) != asked.end()) c.output.measures.push_back(name);
  }

  // Keys added after the golden set, at their default, are not part of the resolved text (the
  // stored /config, the sweep definition): default runs and sweeps stay bit for bit as they were.
  for (const auto& key : kOmittedAtDefault)
    if (v[key] == std::find_if(kKeys.begin(), kKeys.end(), [&](const KeyInfo& k) { return k.key == key; })->default_value)
      v.erase(key);
  c.values = std::move(v);
  return c;
}

std::string Config::to_ini() const {
  std::string out = "# rcsim configuration (fully resolved)\n";
  std::string section;
  // Keys in --help order, grouped by their section.
  for (const auto& k : kKeys) {
    if (!values.count(k.key)) continue;  // kOmittedAtDefault at its default
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
int parse_int_value(const std::string& key, const std::string& text, int min) {
  return parse_int_min(key, text, min);
}
double parse_double_value(const std::string& key, const std::string& text, double min, bool strict) {
  return parse_double_min(key, text, min, strict);
}
std::uint64_t parse_seed_value(const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  char* end = nullptr;
  errno = 0;
  const unsigned long long s = std::strtoull(t.c_str(), &end, 10);
  if (t.empty() || t[0] == '-' || end != t.c_str() + t.size() || errno == ERANGE)
    bad_value(key, text, "expected an unsigned 64-bit integer");
  return s;
}
std::vector<double> parse_number_list_value(const std::string& key, const std::string& text) {
  return parse_number_list(key, text);
}
bool parse_bool_value(const std::string& key, const std::string& text) { return parse_bool(key, text); }


ParsedArgs parse_config_sources(const std::vector<std::string>& cli_args,
                                const std::optional<std::string>& config_file) {
  po::options_description desc;
  for (const auto& k : kKeys) desc.add_options()(k.key.c_str(), po::value<std::string>());
  desc.add_options()("sweep.mode", po::value<std::string>());

  ParsedArgs out;
  std::map<std::string, std::vector<std::string>> sweep_axes;
  std::vector<std::string> sweep_order;
  auto absorb = [&](const po::parsed_options& parsed, const std::string& where) {
    for (const auto& opt : parsed.options) {
      const std::string value = opt.value.empty() ? std::string() : opt.value.front();
      if (opt.value.size() > 1)
        throw UsageError("key '" + printable(opt.string_key) + "' " + where + ": give one value");
      if (opt.string_key == "sweep.mode") {
        if (value != "product" && value != "zip")
          bad_value("sweep.mode", value, "allowed: product | zip");
        out.sweep_mode = value;
      } else if (opt.unregistered || !is_known_key(opt.string_key)) {
        const std::string& key = opt.string_key;
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
        out.values[opt.string_key] = value;
      }
    }
  };

  if (config_file) {
    const std::string name = printable(*config_file);
    std::error_code ec;
    if (std::filesystem::is_directory(*config_file, ec))
      throw UsageError("configuration file '" + name + "' is a directory; --config expects an INI file");
    std::ifstream file(*config_file);
    if (!file) throw UsageError("cannot read configuration file '" + name + "'");
    // INI comments: a line starting with '#' (Boost's) or with ';' (the INI convention; ';'
    // inside a value separates matrix rows, so only whole-line ';' comments are dropped).
    // A UTF-8 byte-order mark at the start (some editors write one) is skipped. A key given
    // twice is refused naming both lines (Boost would silently keep one of them).
    std::ostringstream text;
    std::map<std::string, int> first_line;  // full key ("section.name") -> line number
    std::string section;
    int number = 0;
    for (std::string line; std::getline(file, line);) {
      ++number;
      if (number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
      const auto first = line.find_first_not_of(" \t");
      if (first != std::string::npos && line[first] == ';') line.clear();
      std::string body = line.substr(0, line.find('#'));
      body = trim(body);
      if (!body.empty() && body.front() == '[' && body.back() == ']') {
        section = trim(body.substr(1, body.size() - 2));
      } else if (const auto eq = body.find('='); eq != std::string::npos) {
        const std::string key = (section.empty() ? "" : section + ".") + trim(body.substr(0, eq));
        const auto [it, fresh] = first_line.emplace(key, number);
        if (!fresh)
          throw UsageError("configuration file '" + name + "': key '" + printable(key) + "' is given twice (" + name +
                           ":" + std::to_string(it->second) + " and " + name + ":" + std::to_string(number) +
                           "); keep one of them");
      }
      text << line << "\n";
    }
    if (file.bad()) throw UsageError("cannot read configuration file '" + name + "'");
    std::istringstream in(text.str());
    try {
      absorb(po::parse_config_file(in, desc, /*allow_unregistered=*/true),
             "in configuration file '" + name + "'");
    } catch (const po::error& e) {
      throw UsageError("configuration file '" + name + "': " + printable(e.what(), 2 * kEchoLimit));
    }
  }
  try {
    // Command line after the file: it overwrites the file's values.
    const po::parsed_options parsed = po::command_line_parser(cli_args)
                                          .options(desc)
                                          .style(po::command_line_style::unix_style &
                                                 ~po::command_line_style::allow_guessing)
                                          .allow_unregistered()
                                          .run();
    for (const auto& opt : parsed.options)
      if (opt.position_key >= 0 || opt.string_key.empty())
        throw UsageError("unexpected argument '" + printable(opt.original_tokens.empty() ? std::string() : opt.original_tokens.front()) +
                         "' (keys are given as --key=value)");
    // A key given twice is refused naming it (as in a configuration file), never one kept silently.
    std::map<std::string, std::string> given;
    for (const auto& opt : parsed.options) {
      const std::string value = opt.value.empty() ? std::string() : opt.value.front();
      const auto [it, fresh] = given.emplace(opt.string_key, value);
      if (!fresh)
        throw UsageError("key '" + printable(opt.string_key) + "' is given twice on the command line (--" +
                         printable(opt.string_key) + "=" + printable(it->second) + " and --" + printable(opt.string_key) +
                         "=" + printable(value) + "); keep one of them");
    }
    absorb(parsed, "on the command line");
  } catch (const po::error& e) {
    throw UsageError("command line: " + printable(e.what(), 2 * kEchoLimit));
  }
  for (const auto& axis : sweep_order) out.sweep.emplace_back(axis, sweep_axes[axis]);
  return out;
}

}  // namespace rcsim
