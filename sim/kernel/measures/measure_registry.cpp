#include "kernel/measures/measure_registry.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernel/block/attention_statistics.hpp"
#include "kernel/measures/attention_products.hpp"
#include "kernel/block/backward.hpp"
#include "kernel/block/gradients.hpp"
#include "kernel/measures/clusters.hpp"
#include "kernel/measures/collapse_norms.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/measures/metrics.hpp"
#include "kernel/measures/particles.hpp"
#include "kernel/measures/signal_stats.hpp"

namespace rcsim {

namespace {

using Axis = MeasureAxis;
using Pass = MeasurePass;

// One constructor per kind of entry, so that an entry names what computes it.
MeasureDef core_token(MeasureInfo info, double TokenMeasures::*member, MeasureAttributesFn attributes = nullptr) {
  MeasureDef d{info, Axis::token, Pass::core};
  d.core_token = member;
  d.attributes = attributes;
  return d;
}
MeasureDef core_attention(MeasureInfo info, ReportMeasureFn fn) {
  MeasureDef d{info, Axis::attention, Pass::core};
  d.core_report = fn;
  return d;
}
MeasureDef of_attention_rows(MeasureInfo info, ReportMeasureFn fn) {
  MeasureDef d{info, Axis::attention, Pass::attention_rows};
  d.core_report = fn;
  d.attributes = [](const MeasureContext&) -> std::vector<MeasureAttribute> { return {MeasureAttribute{"sink_threshold", kSinkThreshold, 0, false}}; };
  return d;
}
MeasureDef of_attention_columns(MeasureInfo info, ReportValuesFn fn) {
  MeasureDef d{info, Axis::attention, Pass::attention_rows};
  d.report_values = fn;
  d.shape = MeasureShape::per_token;
  return d;
}
MeasureDef state(MeasureInfo info, StateMeasureFn fn, MeasureAttributesFn attributes = nullptr) {
  MeasureDef d{info, Axis::token, Pass::state};
  d.state = fn;
  d.attributes = attributes;
  return d;
}
MeasureDef of_attention(MeasureInfo info, Pass pass, MatrixMeasureFn fn) {
  MeasureDef d{info, Axis::attention, pass};
  d.of_matrix = fn;
  return d;
}
MeasureDef of_update(MeasureInfo info, UpdateMeasureFn fn) {
  MeasureDef d{info, Axis::attention, Pass::update};
  d.update = fn;
  return d;
}
MeasureDef gradient(MeasureInfo info, DerivativePass pass, MeasureShape shape = MeasureShape::scalar,
                    MeasureAttributesFn attributes = nullptr) {
  MeasureDef d{info, Axis::token, Pass::gradients};
  d.derivative = pass;
  d.shape = shape;
  d.attributes = attributes;
  return d;
}
MeasureDef of_block_gradients(MeasureInfo info, BlockGradientFn fn) {
  MeasureDef d{info, Axis::attention, Pass::gradients};
  d.block_gradient = fn;
  return d;
}

MeasureAttribute real(const char* name, double value) { return {name, value, 0, false}; }

// Karagodin et al.'s parking distance delta = 4 beta^(-1/2), beta the model's inverse temperature
// (model.beta, or 1/sqrt(d_QK)); NaN when beta is not a positive finite number.
double renyi_delta(const ModelSpec& c) {
  const double beta = c.model.beta;
  return beta > 0.0 && std::isfinite(beta) ? 4.0 / std::sqrt(beta) : std::numeric_limits<double>::quiet_NaN();
}
MeasureAttribute integer(const char* name, int value) { return {name, 0.0, value, true}; }

// The measures' functions that are not kernel functions already.
double dong_residual_rel(const Matrix& X) { return dong_residual(X) / composite_norm(X); }
double attention_rank(const ModelSpec& c, const Matrix& A) {
  return numerical_rank(singular_values(A), c.metrics.rank_rtol, c.metrics.rank_atol);
}

// The parameter types of the entries' functions.
using S = const ModelSpec&;
using X = const Matrix&;
using V = const Vector&;

// Always recorded, first the token measures (one SVD of X(t), kernel/measures/metrics.hpp) in the order of
// TokenMeasures, then the layer's report (kernel/block/layer.hpp).
std::vector<MeasureDef> core_measures() {
  return {
      core_token({"mu", "token similarity mu", "same as X", "token similarity ||X - 1 gamma||_F, gamma the mean token"},
                 &TokenMeasures::mu),
      core_token({"mu_rel", "relative token similarity mu/||X||_F", "1", "relative token similarity mu / ||X||_F"},
                 &TokenMeasures::mu_rel),
      core_token({"fro_norm", "Frobenius norm ||X||_F", "same as X", "Frobenius norm ||X||_F"},
                 &TokenMeasures::fro_norm),
      core_token(
          {"sigma_min", "smallest singular value of X", "same as X", "smallest singular value sigma_min(N, d) of X"},
          &TokenMeasures::sigma_min),
      core_token({"sigma_max", "largest singular value of X", "same as X", "largest singular value of X"},
                 &TokenMeasures::sigma_max),
      core_token({"rank", "numerical rank of X", "1", "numerical rank #{sigma_i > max(atol, rtol sigma_max)}"},
                 &TokenMeasures::rank,
                 [](const MeasureContext& s) -> std::vector<MeasureAttribute> {
                   return {real("rtol", s.config.metrics.rank_rtol), real("atol", s.config.metrics.rank_atol)};
                 }),
      core_token({"rank_one_residual", "distance to rank one", "1",
                  "distance to rank one sqrt(sigma_2^2 + ... + sigma_m^2) / ||X||_F"},
                 &TokenMeasures::rank_one_residual),
      core_token({"stable_rank", "stable rank ||X||_F^2/sigma_max^2", "1", "stable rank ||X||_F^2 / sigma_max^2"},
                 &TokenMeasures::stable_rank),
      core_token({"cos_abs_mean", "mean |cosine| over token pairs", "1",
                  "mean |cosine similarity| over token pairs i != j (NaN: fewer than 2 nonzero tokens)"},
                 &TokenMeasures::cos_abs_mean),
      core_token({"sigma_at_max_rank", "singular value at the largest rank", "same as X",
                  "singular value at the largest rank the layer allows (attribute max_rank)"},
                 &TokenMeasures::sigma_at_max_rank,
                 [](const MeasureContext& s) -> std::vector<MeasureAttribute> {
                   return {integer("max_rank", s.max_rank), integer("max_rank_input", s.max_rank_input)};
                 }),
      core_attention({"attn_min", "smallest attention weight", "1",
                      "smallest attention weight over allowed entries and heads (eps of the collapse theorem)"},
                     [](const LayerReport& r) { return r.attention.min_weight; }),
      core_attention({"attn_entropy", "mean attention row entropy", "nat",
                      "mean row entropy of the attention matrix, averaged over heads"},
                     [](const LayerReport& r) { return r.attention.mean_entropy; }),
      core_attention({"degenerate_rows", "rows without direction in the norm", "rows",
                      "rows without direction in the normalisation (zero, or constant for layernorm)"},
                     [](const LayerReport& r) { return static_cast<double>(r.degenerate_rows); }),
  };
}

// The optional measures (output.measures) in their canonical order, by group: peers
// (docs/science/peers.md), signal propagation (docs/science/gradients.md), particles
// (docs/science/particles.md).
std::vector<MeasureDef> peer_measures() {
  return {
      state(
          {"pair_density", "fraction of aligned token pairs", "1",
           "fraction of ordered token pairs i != j with cos(x_i, x_j) > metrics.pair_threshold"},
          [](S c, X x, V) { return pair_density(x, c.metrics.pair_threshold); },
          [](const MeasureContext& s) -> std::vector<MeasureAttribute> {
            return {real("threshold", s.config.metrics.pair_threshold)};
          }),
      state(
          {"clusters", "clusters (cos > metrics.cluster_tau)", "1",
           "connected components of the graph cos(x_i, x_j) > metrics.cluster_tau"},
          [](S c, X x, V) { return static_cast<double>(cluster_count(x, c.metrics.cluster_tau)); },
          [](const MeasureContext& s) -> std::vector<MeasureAttribute> {
            return {real("tau", s.config.metrics.cluster_tau)};
          }),
      state({"dong_residual", "Dong et al.'s residual", "same as X",
             "Dong et al.'s residual sqrt(||R||_1 ||R||_inf), R = X - 1 gamma"},
            [](S, X x, V) { return dong_residual(x); }),
      state({"dong_residual_rel", "relative Dong et al. residual", "1",
             "Dong et al.'s residual relative to the composite norm of X (their figures)"},
            [](S, X x, V) { return dong_residual_rel(x); }),
      state({"effective_rank", "effective rank of X", "1",
             "effective rank exp(-sum p_i ln p_i), p_i = sigma_i / sum sigma"},
            [](S, X, V sigma) { return effective_rank(sigma); }),
      of_attention({"attn_rank", "numerical rank of the attention matrix", "1",
                    "numerical rank of the head-averaged attention matrix (metrics.rank_rtol, rank_atol)"},
                   Pass::attention, attention_rank),
      of_attention({"ergodicity", "ergodicity coefficient of A(t)...A(0)", "1",
                    "ergodicity coefficient of the product A(t) ... A(0) of head-averaged attention matrices"},
                   Pass::attention_product, [](S, X P) { return ergodicity_coefficient(P); }),
  };
}

std::vector<MeasureDef> signal_measures() {
  return {
      state({"cos_mean", "signed mean cosine over token pairs", "1",
             "signed mean cosine similarity over token pairs i != j (NaN: fewer than 2 nonzero tokens)"},
            [](S, X x, V) { return cos_mean(x); }),
      state({"gram_q", "Gram statistic q", "same as X squared", "Gram statistic q = mean diagonal of X X^T / d"},
            [](S, X x, V) { return gram_q(x); }),
      state({"gram_p", "Gram statistic p", "same as X squared", "Gram statistic p = mean off-diagonal of X X^T / d"},
            [](S, X x, V) { return gram_p(x); }),
      state({"massive_ratio", "max |x_ij| / median |x_ij|", "1", "massive activations: max |x_ij| / median |x_ij|"},
            [](S, X x, V) { return massive_ratio(x); }),
      of_update({"update_size", "relative update size of block t", "1",
                 "relative update ||X(t+1) - X(t)||_F / ||X(t)||_F of the block t -> t+1"},
                [](X x, X next) { return update_size(x, next); }),
      gradient({"grad_x_norm", "||dL/dX(t)||_F", "L per unit of X(t)",
                "||dL/dX(t)||_F, L = 1^T X(L) R, R a Gaussian readout (stream 12)"},
               DerivativePass::readout_gradient),
      of_block_gradients({"grad_wq_norm", "||dL/dW_Q||_F of block t", "L per unit of W",
                          "||dL/dW_Q||_F of block t, over all heads, L = 1^T X(L) R"},
                         [](const BlockGrads& g) { return heads_norm(g.dq); }),
      of_block_gradients({"grad_wk_norm", "||dL/dW_K||_F of block t", "L per unit of W",
                          "||dL/dW_K||_F of block t, over all heads, L = 1^T X(L) R"},
                         [](const BlockGrads& g) { return heads_norm(g.dk); }),
      of_block_gradients({"grad_wv_norm", "||dL/dW_V||_F of block t", "L per unit of W",
                          "||dL/dW_V||_F of block t, over all heads, L = 1^T X(L) R"},
                         [](const BlockGrads& g) { return heads_norm(g.dv); }),
      of_block_gradients({"grad_wo_norm", "||dL/dW_O||_F of block t", "L per unit of W",
                          "||dL/dW_O||_F of block t, over all heads (0 without model.value_dim), "
                          "L = 1^T X(L) R"},
                         [](const BlockGrads& g) { return heads_norm(g.dout); }),
      of_block_gradients({"grad_mlp_in_norm", "||dL/dW_in||_F of block t", "L per unit of W",
                          "||dL/dW_in||_F of block t's MLP (0 without an MLP), L = 1^T X(L) R"},
                         [](const BlockGrads& g) { return g.mlp.d_in.norm(); }),
      of_block_gradients({"grad_mlp_out_norm", "||dL/dW_out||_F of block t", "L per unit of W",
                          "||dL/dW_out||_F of block t's MLP (0 without an MLP), L = 1^T X(L) R"},
                         [](const BlockGrads& g) { return g.mlp.d_out.norm(); }),
      gradient({"jacobian_log_fro2", "log ||d(X(L) R)/dX(t)||_F^2", "1",
                "log ||d(X(L) R)/dX(t)||_F^2 (N reverse passes); lambda_g = value at t = 0 over L"},
               DerivativePass::jacobian_fro),
      gradient({"jacobian_log_spec2", "log ||d(X(L) R)/dX(t)||_2^2", "1",
                "log ||d(X(L) R)/dX(t)||_2^2, the squared spectral norm: the largest eigenvalue "
                "of the N x N Gram matrix of the Jacobian's rows (N reverse passes, exact)"},
               DerivativePass::jacobian_spec),
      gradient({"jacobian_log_fro2_full", "log ||dX(L)/dX(t)||_F^2", "1",
                "log ||dX(L)/dX(t)||_F^2 of the full Nd x Nd Jacobian from reverse passes: "
                "exact (N d passes) or Hutchinson's estimate with metrics.jacobian_probes = K "
                "> 0 (K passes, U ~ N(0, I) N x d, stream 17); log(N d) at t = L"},
               DerivativePass::full_fro),
      gradient({"jacobian_log_spec2_full", "log ||dX(L)/dX(t)||_2^2", "1",
                "log ||dX(L)/dX(t)||_2^2, the squared spectral norm of the full Nd x Nd "
                "Jacobian by power iteration on J^T J (one JVP and one VJP per step, "
                "metrics.power_iterations, stream 15): a lower bound converging from below"},
               DerivativePass::full_spectral, MeasureShape::scalar,
               [](const MeasureContext& s) -> std::vector<MeasureAttribute> {
                 return {integer("power_iterations", s.config.metrics.power_iterations),
                         real("power_tolerance", s.config.metrics.power_tolerance)};
               }),
      gradient({"last_token_sensitivity", "S_i(t) = ||d x_N(L)/d x_i(t)||_F", "X(L) per unit of X(t)",
                "S_i(t) = ||d x_N(L) / d x_i(t)||_F, the last token's output row against "
                "each input token i (d reverse passes; over-squashing, Barbero et al. 2024)"},
               DerivativePass::last_token, MeasureShape::per_token),
  };
}

std::vector<MeasureDef> particle_measures() {
  return {
      state({"energy", "interaction energy", "1",
             "interaction energy (1/(2 beta N^2)) sum_ij exp(beta (<x_i, x_j> - 1)) = exp(-beta) E_beta"},
            [](S c, X x, V) { return interaction_energy(x, c.model.beta); }),
      state({"clusters_90", "clusters (cos > 0.9)", "1", "connected components of the graph cos(x_i, x_j) > 0.9"},
            [](S, X x, V) { return static_cast<double>(cluster_count(x, 0.9)); }),
      state({"clusters_99", "clusters (cos > 0.99)", "1", "connected components of the graph cos(x_i, x_j) > 0.99"},
            [](S, X x, V) { return static_cast<double>(cluster_count(x, 0.99)); }),
      state({"clusters_999", "clusters (cos > 0.999)", "1", "connected components of the graph cos(x_i, x_j) > 0.999"},
            [](S, X x, V) { return static_cast<double>(cluster_count(x, 0.999)); }),
      state({"fourier_mode", "largest Fourier mode of the angles", "1",
             "max over k = 1..metrics.fourier_kmax of |mean_j exp(i k theta_j)| of the token angles (d = 2; NaN "
             "otherwise)"},
            [](S, X x, V) { return fourier_mode(x); }),
      state(
          {"fourier_k", "periodicity k of the token angles", "1",
           "the k in 1..8 with the largest |mean_j exp(i k theta_j)| of the token angles (the smallest within 1e-12): "
           "the periodicity of a k-periodic state (d = 2; NaN otherwise)"},
          [](S, X x, V) { return fourier_k(x, kFourierKmax); },
          [](const MeasureContext&) -> std::vector<MeasureAttribute> { return {integer("kmax", kFourierKmax)}; }),
      state(
          {"largest_cluster", "fraction in the largest cluster", "1",
           "largest cluster: the fraction of the tokens in the largest component of the graph "
           "cos(x_i, x_j) > metrics.cluster_tau"},
          [](S c, X x, V) { return largest_cluster_fraction(x, c.metrics.cluster_tau); },
          [](const MeasureContext& s) -> std::vector<MeasureAttribute> {
            return {real("tau", s.config.metrics.cluster_tau)};
          }),
      state(
          {"renyi_centres", "Renyi-parking centres", "1",
           "Renyi-parking centres: tokens in causal order, each a centre when at Euclidean "
           "distance >= delta = 4 beta^(-1/2) from every earlier centre (Karagodin et al.)"},
          [](S c, X x, V) {
            const double delta = renyi_delta(c);
            return std::isnan(delta) ? delta : static_cast<double>(renyi_parking_centres(x, delta));
          },
          [](const MeasureContext& s) -> std::vector<MeasureAttribute> { return {real("delta", renyi_delta(s.config))}; }),
      state(
          {"strong_renyi_centres", "strong Renyi centres", "1",
           "strong Renyi centres: tokens farther than delta = 4 beta^(-1/2) from every earlier token "
           "(strict; metrics.renyi_distance; Karagodin et al.)"},
          [](S c, X x, V) {
            const double delta = renyi_delta(c);
            return std::isnan(delta) ? delta
                                     : static_cast<double>(strong_renyi_centres(x, delta, c.metrics.renyi_distance));
          },
          [](const MeasureContext& s) -> std::vector<MeasureAttribute> {
            return {real("delta", renyi_delta(s.config)),
                    integer("geodesic", s.config.metrics.renyi_distance == RenyiDistance::geodesic)};
          }),
  };
}

// The attention statistics of SCIENCE.md section 8 (docs/science/attention-statistics.md), which
// every platform computes in its own pass: the cpu platform without the N x N matrix.
std::vector<MeasureDef> attention_statistics_measures() {
  return {
      of_attention_rows({"attn_max_weight", "mean largest attention weight", "1",
                         "mean over rows of the largest weight max_j A_ij, averaged over heads"},
                        [](const LayerReport& r) { return r.attention.mean_max_weight; }),
      of_attention_rows({"attn_sink", "mean attention on the first token", "1",
                         "mean over rows of the weight A_i1 on the first token (the sink), averaged over heads"},
                        [](const LayerReport& r) { return r.attention.mean_sink_weight; }),
      of_attention_rows({"sink_rate", "fraction of sink heads", "1",
                         "fraction of heads whose mean weight on the first token exceeds the attribute "
                         "sink_threshold (Gu et al. 2024: 0.3)"},
                        [](const LayerReport& r) { return r.attention.sink_rate; }),
      of_attention_columns({"attn_received", "attention received per token", "1",
                            "column sums c_j = sum_i A_ij (attention token j receives), averaged over heads"},
                           [](const LayerReport& r) -> const Vector& { return r.attention.received; }),
  };
}

std::vector<MeasureDef> build_registry() {
  std::vector<MeasureDef> all;
  for (auto group : {core_measures(), peer_measures(), signal_measures(), particle_measures(),
                     attention_statistics_measures()})
    all.insert(all.end(), group.begin(), group.end());
  return all;
}

}  // namespace

const std::vector<MeasureDef>& measure_registry() {
  static const std::vector<MeasureDef> registry = build_registry();
  return registry;
}

const MeasureDef* find_measure(const std::string& name) {
  for (const MeasureDef& d : measure_registry())
    if (name == d.info.name) return &d;
  return nullptr;
}

const std::vector<std::string>& optional_measure_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const MeasureDef& d : measure_registry())
      if (d.optional()) v.emplace_back(d.info.name);
    return v;
  }();
  return names;
}

// output.measures's names, defined here so that the registry is their one list.
const std::vector<std::string>& peer_measure_names() { return optional_measure_names(); }

std::string optional_measure_names_text() {
  std::string text;
  for (const auto& name : optional_measure_names()) text += (text.empty() ? "" : " | ") + name;
  return text;
}

MeasureInfo measure_info(const MeasureDef& def, const ModelSpec& c) {
  MeasureInfo info = def.info;
  if (def.pass != Pass::gradients || c.metrics.readout != Readout::last_token) return info;
  static const std::pair<const char*, const char*> last_token[] = {
      {"1^T X(L) R", "x_N(L) R"}, {"d(X(L) R)", "d(x_N(L) R)"}, {"N reverse passes", "one reverse pass"}};
  for (std::string* text : {&info.long_name, &info.description})
    for (const auto& [from, to] : last_token)
      for (std::size_t k = text->find(from); k != std::string::npos; k = text->find(from, k))
        text->replace(k, std::string(from).size(), to);
  return info;
}

bool measure_wanted(const ModelSpec& c, const MeasureDef& def) {
  return !def.optional() ||
         std::find(c.output.measures.begin(), c.output.measures.end(), def.info.name) != c.output.measures.end();
}

bool wants_pass(const ModelSpec& c, MeasurePass pass) {
  for (const auto& name : c.output.measures)
    if (const MeasureDef* d = find_measure(name); d && d->pass == pass) return true;
  return false;
}

int values_per_layer(const MeasureDef& def, int tokens) { return def.shape == MeasureShape::per_token ? tokens : 1; }

const char* value_axis_name(const MeasureDef& def) { return def.shape == MeasureShape::per_token ? "token" : nullptr; }

std::vector<MeasureAttribute> measure_attributes(const MeasureDef& def, const MeasureContext& s) {
  return def.attributes ? def.attributes(s) : std::vector<MeasureAttribute>{};
}

}  // namespace rcsim
