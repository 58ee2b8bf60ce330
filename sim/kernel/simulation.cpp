#include "kernel/simulation.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "kernel/memory.hpp"
#include "kernel/attention_products.hpp"
#include "kernel/clusters.hpp"
#include "kernel/collapse_norms.hpp"
#include "kernel/block.hpp"
#include "kernel/dropout.hpp"
#include "kernel/layer.hpp"
#include "kernel/metrics.hpp"
#include "kernel/normalization.hpp"
#include "kernel/particles.hpp"
#include "kernel/random.hpp"
#include "kernel/threads.hpp"

namespace rcsim {

const std::vector<MeasureInfo>& token_measure_info() {
  static const std::vector<MeasureInfo> info = {
      {"mu", "token similarity ||X - 1 gamma||_F, gamma the mean token", "same as X"},
      {"mu_rel", "relative token similarity mu / ||X||_F", "1"},
      {"fro_norm", "Frobenius norm ||X||_F", "same as X"},
      {"sigma_min", "smallest singular value sigma_min(N, d) of X", "same as X"},
      {"sigma_max", "largest singular value of X", "same as X"},
      {"rank", "numerical rank #{sigma_i > max(atol, rtol sigma_max)}", "1"},
      {"rank_one_residual", "distance to rank one sqrt(sigma_2^2 + ... + sigma_m^2) / ||X||_F", "1"},
      {"stable_rank", "stable rank ||X||_F^2 / sigma_max^2", "1"},
      {"cos_abs_mean", "mean |cosine similarity| over token pairs i != j (NaN: fewer than 2 nonzero tokens)", "1"},
      {"sigma_at_max_rank", "singular value at the largest rank the layer allows (attribute max_rank)", "same as X"},
  };
  return info;
}

const std::vector<MeasureInfo>& attention_measure_info() {
  static const std::vector<MeasureInfo> info = {
      {"attn_min", "smallest attention weight over allowed entries and heads (eps of the collapse theorem)", "1"},
      {"attn_entropy", "mean row entropy of the attention matrix, averaged over heads", "nat"},
      {"degenerate_rows", "rows without direction in the normalisation (zero, or constant for layernorm)", "rows"},
  };
  return info;
}

const PeerMeasureInfo& peer_measure_info(const std::string& name) {
  static const std::vector<PeerMeasureInfo> info = {
      {{"pair_density", "fraction of ordered token pairs i != j with cos(x_i, x_j) > metrics.pair_threshold", "1"}, true},
      {{"clusters", "connected components of the graph cos(x_i, x_j) > metrics.cluster_tau", "1"}, true},
      {{"dong_residual", "Dong et al.'s residual sqrt(||R||_1 ||R||_inf), R = X - 1 gamma", "same as X"}, true},
      {{"dong_residual_rel", "Dong et al.'s residual relative to the composite norm of X (their figures)", "1"}, true},
      {{"effective_rank", "effective rank exp(-sum p_i ln p_i), p_i = sigma_i / sum sigma", "1"}, true},
      {{"attn_rank", "numerical rank of the head-averaged attention matrix (metrics.rank_rtol, rank_atol)", "1"}, false},
      {{"ergodicity", "ergodicity coefficient of the product A(t) ... A(0) of head-averaged attention matrices", "1"},
       false},
      // --- Particles (docs/science/particles.md) ---
      {{"energy", "interaction energy (1/(2 beta N^2)) sum_ij exp(beta (<x_i, x_j> - 1)) = exp(-beta) E_beta", "1"},
       true},
      {{"clusters_90", "connected components of the graph cos(x_i, x_j) > 0.9", "1"}, true},
      {{"clusters_99", "connected components of the graph cos(x_i, x_j) > 0.99", "1"}, true},
      {{"clusters_999", "connected components of the graph cos(x_i, x_j) > 0.999", "1"}, true},
      {{"fourier_mode", "max over k = 1..4 of |mean_j exp(i k theta_j)| of the token angles (d = 2; NaN otherwise)", "1"},
       true},
  };
  for (std::size_t i = 0; i < peer_measure_names().size(); ++i)
    if (peer_measure_names()[i] == name) return info[i];
  throw std::logic_error("unknown peer measure " + name);
}

EngineSetup prepare(const ModelSpec& c, const MaskMatrix* custom, InputArrays inputs) {
  EngineSetup s;
  s.config = c;
  s.mask = make_mask(c, custom);
  s.graph = analyse_mask(s.mask);
  s.files = std::move(inputs);
  s.max_rank = max_rank_after_layer(c);
  s.max_rank_input = std::min(c.model.tokens, c.model.dim);
  return s;
}

double run_memory_bytes(const ModelSpec& c) {
  const double T = c.run.trials, L = c.model.layers, N = c.model.tokens, d = c.model.dim;
  const double S = c.output.measure_layers.empty() ? L + 1 : static_cast<double>(c.output.measure_layers.size());
  const double Sa = std::min(S, L);  // layer L has no attention diagnostics
  double values = T * (S * static_cast<double>(token_measure_info().size()) +
                       Sa * static_cast<double>(attention_measure_info().size()));
  if (c.output.spectrum) values += T * S * std::min(N, d);
  values += T * static_cast<double>(c.output.token_layers.size()) * N * d;
  if (c.output.attention) values += T * Sa * N * N;
  return 2.0 * 8.0 * values + 8.0 * (L + 1) + work_memory_bytes(c);
}

double work_memory_bytes(const ModelSpec& c) {
  const double N = c.model.tokens, d = c.model.dim, H = c.model.heads, dk = c.model.key_dim;
  const double dv = c.model.value_dim, w = c.mlp.width;
  const double weights = H * (2 * d * dk + (dv > 0 ? 2 * d * dv : d * d)) + (w > 0 ? 2 * d * w + w + d : 0) + 4 * d;
  const double rk4 = c.integrator == Integrator::rk4 ? 5 * N * d : 0;  // the stages k1..k4 and their point
  const double per_thread = N * N * (c.output.attention ? 2 : 1) + 12 * N * d + rk4 + weights;
  const double threads = resolve_threads(c.run.threads, std::max(c.run.trials, 1));
  const double program = 16e6;  // the program and its libraries (peak RSS of a tiny run: 15-16 MiB)
  return program + 2.0 * N * N + 8.0 * threads * per_thread;
}

void require_run_memory(const ModelSpec& c) {
  const double total = run_memory_bytes(c), work = work_memory_bytes(c);
  require_memory(total, "the run of '" + c.output.file + "'",
                 work > total - work
                     ? "most of it is working storage (" + format_bytes(work) +
                           ": the N x N attention matrix, the weights, per worker thread): choose fewer "
                           "model.tokens, a smaller model.dim, or fewer run.threads"
                     : "record fewer layers (output.schedule), snapshots (output.tokens), the spectrum, or fewer trials");
}

RunResults allocate_results(const EngineSetup& s) {
  const ModelSpec& c = s.config;
  RunResults r;
  r.trials = c.run.trials;
  r.layers = c.model.layers;
  r.spectrum_size = std::min(c.model.tokens, c.model.dim);
  r.layer_index = c.output.measure_layers;
  if (r.layer_index.empty())  // a Config built by hand: every layer
    for (int t = 0; t <= r.layers; ++t) r.layer_index.push_back(t);
  r.column_of_layer.assign(static_cast<std::size_t>(r.layers) + 1, -1);
  r.column_of_attention_layer.assign(static_cast<std::size_t>(r.layers), -1);
  for (std::size_t k = 0; k < r.layer_index.size(); ++k) {
    const int t = r.layer_index[k];
    r.column_of_layer[static_cast<std::size_t>(t)] = static_cast<int>(k);
    if (t < r.layers) {
      r.column_of_attention_layer[static_cast<std::size_t>(t)] = static_cast<int>(r.attention_layer_index.size());
      r.attention_layer_index.push_back(t);
    }
  }
  const auto S = static_cast<Eigen::Index>(r.layer_index.size());
  const auto Sa = static_cast<Eigen::Index>(r.attention_layer_index.size());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r.token_info = token_measure_info();
  r.attention_info = attention_measure_info();
  for (const auto& name : c.output.measures) {
    const PeerMeasureInfo& p = peer_measure_info(name);
    (p.token ? r.token_info : r.attention_info).push_back(p.info);
  }
  r.token.assign(r.token_info.size(), Matrix::Constant(r.trials, S, nan));
  r.attention.assign(r.attention_info.size(), Matrix::Constant(r.trials, Sa, nan));
  if (c.output.spectrum) r.spectrum.assign(static_cast<std::size_t>(r.trials), Matrix());
  if (!c.output.token_layers.empty()) r.snapshots.assign(static_cast<std::size_t>(r.trials), {});
  if (c.output.attention) r.attention_matrices.assign(static_cast<std::size_t>(r.trials), {});
  r.underflow_layer.assign(static_cast<std::size_t>(r.trials), -1);
  r.nonfinite_layer.assign(static_cast<std::size_t>(r.trials), -1);
  r.degenerate_total.assign(static_cast<std::size_t>(r.trials), 0);
  return r;
}

namespace {

void record(const TokenMeasures& m, int trial, int layer, RunResults& r) {
  const double values[] = {m.mu,   m.mu_rel,           m.fro_norm,    m.sigma_min,    m.sigma_max,
                           m.rank, m.rank_one_residual, m.stable_rank, m.cos_abs_mean, m.sigma_at_max_rank};
  for (std::size_t i = 0; i < std::size(values); ++i) r.token[i](trial, layer) = values[i];
}

// The token measures of output.measures (docs/peers.md), after the default ones.
void record_peer_tokens(const ModelSpec& c, const Matrix& X, const Vector& sigma, int trial, int layer, RunResults& r) {
  std::size_t i = token_measure_info().size();
  for (const auto& name : c.output.measures) {
    double value;
    if (name == "pair_density")
      value = pair_density(X, c.metrics.pair_threshold);
    else if (name == "clusters")
      value = cluster_count(X, c.metrics.cluster_tau);
    else if (name == "dong_residual")
      value = dong_residual(X);
    else if (name == "dong_residual_rel")
      value = dong_residual(X) / composite_norm(X);
    else if (name == "effective_rank")
      value = effective_rank(sigma);
    else if (name == "energy")  // particles (docs/science/particles.md)
      value = interaction_energy(X, c.model.beta);
    else if (name == "clusters_90")
      value = cluster_count(X, 0.9);
    else if (name == "clusters_99")
      value = cluster_count(X, 0.99);
    else if (name == "clusters_999")
      value = cluster_count(X, 0.999);
    else if (name == "fourier_mode")
      value = fourier_mode(X);
    else
      continue;
    r.token[i++](trial, layer) = value;
  }
}

}  // namespace

bool run_trial(const EngineSetup& s, int trial, RunResults& r, const std::atomic<bool>* cancel) {
  const ModelSpec& c = s.config;
  const int N = c.model.tokens, d = c.model.dim, L = c.model.layers;
  const auto ti = static_cast<std::size_t>(trial);
  RandomStream rng(c.run.seed, static_cast<std::uint64_t>(trial));
  Matrix X = initial_tokens(c, s.files, trial, rng);
  Matrix X_next(N, d);
  WeightSampler sampler(c, s.files);
  sampler.begin_trial(rng);
  const Normalization norm = Normalization::from_config(c);
  // Peer attention measures (docs/peers.md): the head-averaged attention and the product of them.
  const auto asked = [&](const char* name) {
    return std::find(c.output.measures.begin(), c.output.measures.end(), name) != c.output.measures.end();
  };
  const bool want_attn_rank = asked("attn_rank"), want_ergodicity = asked("ergodicity");
  Matrix product = want_ergodicity ? Matrix(Matrix::Identity(N, N)) : Matrix();
  BlockParams params{layer_params(c, &s.mask, &norm), c.norm.position, c.mlp.activation};
  params.layer.keep_attention = want_attn_rank || want_ergodicity || c.output.attention;
  if (c.output.attention) r.attention_matrices[ti].clear();
  // Block structure, dropout and precision.
  RandomStream dropout_rng(c.run.seed, static_cast<std::uint64_t>(trial), kDropoutStream);
  const Dropout dropout{c.dropout.attention, c.dropout.output, &dropout_rng};
  if (c.dropout.attention > 0.0 || c.dropout.output > 0.0) params.layer.dropout = &dropout;
  // run.precision = float32: the block computes in float (transformer_block's float overload) on
  // the tokens and weights rounded to float; X holds the float tokens exactly, in double, for the
  // measures.
  const bool single = c.run.precision == Precision::float32;
  if (single) X = X.cast<float>().cast<double>();
  BlockWorkspace ws(single ? 0 : N, single ? 0 : d, c.model.key_dim);
  std::optional<BlockWorkspaceT<float>> ws_float;
  if (single) ws_float.emplace(N, d, c.model.key_dim);
  LayerWeightsT<float> w_float;
  MatrixF X_float, X_next_float;
  const Matrix& attention_mean = single ? ws_float->layer.attention_mean : ws.layer.attention_mean;
  MeasureOptions opt{c.metrics.rank_rtol, c.metrics.rank_atol, s.max_rank_input};
  Vector sigma;
  std::size_t next_snapshot = 0;
  const auto& snap_layers = c.output.token_layers;
  if (!r.spectrum.empty())
    r.spectrum[ti] = Matrix::Constant(static_cast<Eigen::Index>(r.layer_index.size()), r.spectrum_size,
                                      std::numeric_limits<double>::quiet_NaN());

  for (int t = 0; t <= L; ++t) {
    if (cancel && cancel->load(std::memory_order_relaxed)) return false;
    if (!all_finite(X)) {
      r.nonfinite_layer[ti] = t;
      break;
    }
    const int col = r.column_of_layer[static_cast<std::size_t>(t)];  // output.schedule
    if (col >= 0) {
      const TokenMeasures m = measure_tokens(X, opt, sigma);
      record(m, trial, col, r);
      if (!c.output.measures.empty()) record_peer_tokens(c, X, sigma, trial, col, r);
      if (!r.spectrum.empty()) r.spectrum[ti].row(col) = sigma.transpose();
      if (r.underflow_layer[ti] < 0 && !(m.mu >= std::numeric_limits<double>::min())) r.underflow_layer[ti] = t;
    } else if (r.underflow_layer[ti] < 0 && !(token_similarity(X) >= std::numeric_limits<double>::min())) {
      r.underflow_layer[ti] = t;  // underflow is detected at every layer, recorded or not
    }
    if (next_snapshot < snap_layers.size() && snap_layers[next_snapshot] == t) {
      r.snapshots[ti].push_back(X);
      ++next_snapshot;
    }
    if (t == L) break;
    const LayerWeights& w = sampler.layer(t, rng);
    LayerReport rep;
    if (single) {
      cast_weights(w, w_float);
      X_float = X.cast<float>();
      rep = transformer_block(X_float, w_float, params, *ws_float, X_next_float);
      X_next = X_next_float.cast<double>();
    } else {
      rep = transformer_block(X, w, params, ws, X_next);
    }
    if (const int acol = r.column_of_attention_layer[static_cast<std::size_t>(t)]; acol >= 0) {
      r.attention[0](trial, acol) = rep.attention.min_weight;
      r.attention[1](trial, acol) = rep.attention.mean_entropy;
      r.attention[2](trial, acol) = rep.degenerate_rows;
    }
    if (params.layer.keep_attention) {
      if (want_ergodicity) product = attention_mean * product;
      if (const int acol = r.column_of_attention_layer[static_cast<std::size_t>(t)]; acol >= 0) {
        std::size_t i = attention_measure_info().size();
        if (want_attn_rank)
          r.attention[i++](trial, acol) =
              numerical_rank(singular_values(attention_mean), c.metrics.rank_rtol, c.metrics.rank_atol);
        if (want_ergodicity) r.attention[i++](trial, acol) = ergodicity_coefficient(product);
        if (c.output.attention) r.attention_matrices[ti].push_back(attention_mean);
      }
    }
    r.degenerate_total[ti] += rep.degenerate_rows;
    X.swap(X_next);
    opt.max_rank = s.max_rank;
  }
  // Snapshots of layers never reached (non-finite tokens) are stored as NaN.
  while (!r.snapshots.empty() && r.snapshots[ti].size() < snap_layers.size())
    r.snapshots[ti].push_back(Matrix::Constant(N, d, std::numeric_limits<double>::quiet_NaN()));
  while (!r.attention_matrices.empty() && r.attention_matrices[ti].size() < r.attention_layer_index.size())
    r.attention_matrices[ti].push_back(Matrix::Constant(N, N, std::numeric_limits<double>::quiet_NaN()));
  return true;
}

int resolve_threads(int requested, int trials) {
  int n = requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, std::min(n, trials));
}

void run_trials(const EngineSetup& s, int threads, RunResults& r, const std::vector<char>& skip,
                const RunControl& ctl) {
  const int T = s.config.run.trials;
  std::vector<int> todo;
  for (int t = 0; t < T; ++t)
    if (skip.empty() || !skip[static_cast<std::size_t>(t)]) todo.push_back(t);
  const int total = static_cast<int>(todo.size());
  const int n_threads = resolve_threads(threads, std::max(total, 1));
  std::atomic<int> next{0};
  int done = 0;
  std::exception_ptr error;
  std::mutex mutex;
  auto worker = [&] {
    try {
      for (;;) {
        if (ctl.cancel && ctl.cancel->load()) return;
        const int k = next.fetch_add(1);
        if (k >= total) return;
        const int trial = todo[static_cast<std::size_t>(k)];
        if (!run_trial(s, trial, r, ctl.cancel)) return;  // each trial writes only its own rows
        std::lock_guard<std::mutex> lock(mutex);
        ++done;
        if (ctl.on_trial_done) ctl.on_trial_done(trial);
        if (ctl.progress) ctl.progress(done, total);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      next.store(total);
    }
  };
  if (n_threads == 1) {
    worker();
  } else {  // a thread the system refuses: one error naming run.threads, never std::terminate
    run_workers(n_threads, false, worker, [&] { next.store(total); }, "run.threads", n_threads);
  }
  if (error) std::rethrow_exception(error);
  if (ctl.cancel && ctl.cancel->load()) throw Interrupted();
}

RunResults run_simulation(const EngineSetup& s, int threads, const std::atomic<bool>* cancel,
                          const std::function<void(int, int)>& progress) {
  RunResults r = allocate_results(s);
  RunControl ctl;
  ctl.cancel = cancel;
  ctl.progress = progress;
  run_trials(s, threads, r, {}, ctl);
  return r;
}

}  // namespace rcsim
