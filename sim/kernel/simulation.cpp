#include "kernel/simulation.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "kernel/memory.hpp"
#include "kernel/block.hpp"
#include "kernel/dropout.hpp"
#include "kernel/errors.hpp"
#include "kernel/forward_mode.hpp"
#include "kernel/fused_attention.hpp"
#include "kernel/gradients.hpp"
#include "kernel/layer.hpp"
#include "kernel/metrics.hpp"
#include "kernel/noise.hpp"
#include "kernel/platform.hpp"
#include "kernel/normalization.hpp"
#include "kernel/random.hpp"
#include "kernel/threads.hpp"

namespace rcsim {

namespace {
std::vector<MeasureInfo> core_info(MeasureAxis axis) {
  std::vector<MeasureInfo> info;
  for (const MeasureDef& d : measure_registry())
    if (!d.optional() && d.axis == axis) info.push_back(d.info);
  return info;
}
}  // namespace

const std::vector<MeasureInfo>& token_measure_info() {
  static const std::vector<MeasureInfo> info = core_info(MeasureAxis::token);
  return info;
}

const std::vector<MeasureInfo>& attention_measure_info() {
  static const std::vector<MeasureInfo> info = core_info(MeasureAxis::attention);
  return info;
}

namespace {
bool wants(const ModelSpec& c, const char* name) {
  return std::find(c.output.measures.begin(), c.output.measures.end(), name) != c.output.measures.end();
}

bool wants_gradients(const ModelSpec& c) { return wants_pass(c, MeasurePass::gradients); }

// What the forward-mode pass (kernel/forward_mode.hpp) does not cover: the settings the reverse pass
// gained last (the particle and peer dynamics); a UsageError naming the measure and the key.
void require_forward_mode(const ModelSpec& c) {
  const auto refuse = [](const std::string& setting) {
    throw UsageError("output.measures: jacobian_log_spec2_full (the forward-mode pass) does not support " + setting +
                     " (the reverse-pass measures do: jacobian_log_fro2, jacobian_log_spec2, grad_*)");
  };
  if (c.integrator == Integrator::rk4) refuse("dynamics.integrator = rk4");
  if (c.residual_project != ResidualProject::none) refuse("residual.project = tangent");
  if (c.dynamics_noise > 0.0) refuse("dynamics.noise");
  if (c.attention_kind == AttentionKind::random_markov) refuse("attention.kind = random_markov");
}

}  // namespace

EngineSetup prepare(const ModelSpec& c, const MaskMatrix* custom, InputArrays inputs) {
  EngineSetup s;
  s.config = c;
  s.mask = make_mask(c, custom);
  s.graph = analyse_mask(s.mask);
  s.files = std::move(inputs);
  s.max_rank = max_rank_after_layer(c);
  s.max_rank_input = std::min(c.model.tokens, c.model.dim);
  if (wants(c, "jacobian_log_spec2") && c.metrics.jacobian_probes > 0)
    throw UsageError("output.measures: jacobian_log_spec2 is computed exactly (N reverse passes) and has no "
                     "Hutchinson estimate; metrics.jacobian_probes = " + std::to_string(c.metrics.jacobian_probes) +
                     " is allowed only without it (set metrics.jacobian_probes = 0, or leave jacobian_log_spec2 out)");
  if (wants(c, "jacobian_log_spec2_full")) require_forward_mode(c);
  if (wants(c, "jacobian_log_spec2_full") && c.run.precision == Precision::float32)
    throw UsageError("output.measures: jacobian_log_spec2_full (the forward-mode pass) is computed in float64 only; "
                     "run.precision = float32 is not supported with it (set run.precision = float64, or leave "
                     "jacobian_log_spec2_full out)");
  return s;
}

namespace {
// The recorded layers S and the recorded attention layers S_a (those below L) of `c`.
std::pair<double, double> recorded_layers(const ModelSpec& c) {
  const double L = c.model.layers;
  if (c.output.measure_layers.empty()) return {L + 1, L};
  double Sa = 0;  // layer L has no attention diagnostics
  for (const int t : c.output.measure_layers) Sa += t < c.model.layers;
  return {static_cast<double>(c.output.measure_layers.size()), Sa};
}
}  // namespace

double trial_large_bytes(const ModelSpec& c) {
  const double N = c.model.tokens, d = c.model.dim;
  const auto [S, Sa] = recorded_layers(c);
  double values = 0;
  if (c.output.spectrum) values += S * std::min(N, d);
  values += static_cast<double>(c.output.token_layers.size()) * N * d;
  if (c.output.attention) values += Sa * N * N;
  return 8.0 * values;
}

double results_memory_bytes(const ModelSpec& c, bool whole) {
  const double T = c.run.trials, L = c.model.layers;
  const auto [S, Sa] = recorded_layers(c);
  double token_columns = 0, attention_columns = 0;  // the core measures and the asked ones
  for (const MeasureDef& m : measure_registry())
    if (measure_wanted(c, m))
      (m.axis == MeasureAxis::token ? token_columns : attention_columns) += values_per_layer(m, c.model.tokens);
  const double measures = 8.0 * T * (S * token_columns + Sa * attention_columns);
  // The large per-trial data: freed once a checkpoint flush has written them (run_to_file), so at
  // most the cap, the trials in flight and one more (io/checkpoint.hpp, docs/dev/memory.md).
  const double per_trial = trial_large_bytes(c);
  const double threads = resolve_threads(c.run.threads, std::max(c.run.trials, 1));
  const double large = whole ? T * per_trial : std::min(T * per_trial, kPendingLargeBytes + (threads + 1) * per_trial);
  return measures + large + 8.0 * (L + 1);
}

// The formula, measured against the peak RSS by tests/hostile/memory_estimate.py (ctest
// memory_estimate, within 25%) and documented in docs/dev/memory.md:
//   peak = program + mask + threads x per-thread work + results (+ the image twice, in memory)
// The results are held once: the run file and the checkpoint are written on disk by HDF5
// (h5::File::create_on_disk) one trial of a large dataset at a time, so neither the file's image
// nor a concatenated copy of a dataset is in memory, and the large per-trial data leave memory
// when a checkpoint flush has written them. A file image (run_to_image: Python) holds the whole
// results, the file in memory and its copy: three times the results at most (uncompressed:
// compression cannot be known in advance, so this is an upper bound).
double run_memory_bytes(const ModelSpec& c, bool image) {
  return (image ? 3.0 * results_memory_bytes(c, true) : results_memory_bytes(c)) + work_memory_bytes(c);
}

int jacobian_chunk_layers(const ModelSpec& c) {
  const double per_layer = 8.0 * c.model.tokens * c.model.tokens * static_cast<double>(c.model.dim);
  const double fit = std::floor(kGradientStoreBytes / per_layer);
  return fit >= c.model.layers + 1.0 ? c.model.layers + 1 : std::max(1, static_cast<int>(fit));
}

double work_memory_bytes(const ModelSpec& c) {
  const double N = c.model.tokens, d = c.model.dim;
  const double rk4 = c.integrator == Integrator::rk4 ? 5 * N * d : 0;  // the stages k1..k4 and their point
  // The attention: the N x N matrix (reference platform), or the cpu platform's row blocks of logits
  // and a row buffer on each of the trial's threads (fused_attention.cpp), and its q, k, v (3 N d).
  const double attention = resolved_platform(c) == Platform::cpu
                               ? threads_per_trial(c) * (fused_rows_per_block(c.model.tokens) + 1.0) * N + 3 * N * d
                               : N * N * (c.output.attention ? 2 : 1);
  const double per_thread = attention + 12 * N * d + rk4 + layer_weight_values(c);
  const double threads = resolve_threads(c.run.threads, std::max(c.run.trials, 1));
  // The program, its libraries, HDF5's caches and the allocator's arenas: the peak RSS of a tiny
  // run (tests/hostile/memory_estimate.py, case "tiny").
  const double program = kProgramBytes;
  // The gradient measures keep the blocks' inputs and weights for the reverse pass (all of them, or
  // checkpoints and one segment: kernel/gradients.hpp), and its work matrices.
  const double stored =
      wants_gradients(c) ? gradient_store_bytes(c, gradient_segment_length(c)) / 8.0 + 20 * N * d + 4 * N * N : 0.0;
  // jacobian_log_spec2 keeps the N rows (N x N d) of the Jacobian at a chunk of recorded layers, and
  // the N x N Gram matrix with its eigensolver's work.
  const double S = recorded_layers(c).first;
  const double rows = wants(c, "jacobian_log_spec2") ? std::min(S, static_cast<double>(jacobian_chunk_layers(c))) * N * N * d + 4 * N * N : 0.0;
  return program + 2.0 * N * N + 8.0 * threads * (per_thread + stored + rows);
}

void require_run_memory(const ModelSpec& c, bool image) {
  const double total = run_memory_bytes(c, image), work = work_memory_bytes(c);
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
  r.tokens = c.model.tokens;
  r.dim = c.model.dim;
  r.snapshot_layers = static_cast<int>(c.output.token_layers.size());
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
  for (const auto& name : c.output.measures)
    if (const MeasureDef* d = find_measure(name); !d || !d->optional())
      throw std::logic_error("unknown peer measure " + name);
  for (const MeasureDef& d : measure_registry()) {
    if (!measure_wanted(c, d)) continue;
    const bool token = d.axis == MeasureAxis::token;
    (token ? r.token_info : r.attention_info).push_back(measure_info(d, c));
    (token ? r.token_defs : r.attention_defs).push_back(&d);
  }
  // Each measure's values_per_layer() columns per recorded layer (kernel/measure_registry.hpp).
  for (const MeasureDef* d : r.token_defs) r.token.push_back(Matrix::Constant(r.trials, S * values_per_layer(*d, r.tokens), nan));
  for (const MeasureDef* d : r.attention_defs)
    r.attention.push_back(Matrix::Constant(r.trials, Sa * values_per_layer(*d, r.tokens), nan));
  if (c.output.spectrum) r.spectrum.assign(static_cast<std::size_t>(r.trials), Matrix());
  if (!c.output.token_layers.empty()) r.snapshots.assign(static_cast<std::size_t>(r.trials), {});
  if (c.output.attention) r.attention_matrices.assign(static_cast<std::size_t>(r.trials), {});
  r.underflow_layer.assign(static_cast<std::size_t>(r.trials), -1);
  r.nonfinite_layer.assign(static_cast<std::size_t>(r.trials), -1);
  r.degenerate_total.assign(static_cast<std::size_t>(r.trials), 0);
  return r;
}

namespace {

// The token measures of X(t) at column `col`: the core ones from `m` (one SVD), the optional ones
// of the state from their functions; the gradient measures are filled after the reverse pass.
void record_tokens(const ModelSpec& c, const TokenMeasures& m, const Matrix& X, const Vector& sigma, int trial, int col,
                   RunResults& r) {
  for (std::size_t i = 0; i < r.token_defs.size(); ++i) {
    const MeasureDef& d = *r.token_defs[i];
    if (d.pass == MeasurePass::core)
      r.token[i](trial, col) = m.*d.core_token;
    else if (d.pass == MeasurePass::state)
      r.token[i](trial, col) = d.state(c, X, sigma);
  }
}

// The attention measures of the block t -> t+1 at column `acol` filled during the forward pass:
// the layer's report, and those of the head-averaged attention A(t) and of the product P.
void record_attention(const ModelSpec& c, const LayerReport& rep, const Matrix& A, const Matrix& P, int trial, int acol,
                      RunResults& r) {
  for (std::size_t i = 0; i < r.attention_defs.size(); ++i) {
    const MeasureDef& d = *r.attention_defs[i];
    if (d.pass == MeasurePass::core)
      r.attention[i](trial, acol) = d.core_report(rep);
    else if (d.pass == MeasurePass::attention)
      r.attention[i](trial, acol) = d.of_matrix(c, A);
    else if (d.pass == MeasurePass::attention_product)
      r.attention[i](trial, acol) = d.of_matrix(c, P);
  }
}

std::size_t info_index(const std::vector<MeasureInfo>& info, const char* name) {
  for (std::size_t i = 0; i < info.size(); ++i)
    if (std::string(info[i].name) == name) return i;
  throw std::logic_error(std::string("measure not allocated: ") + name);
}

// The Jacobian measures of J_t = d(X(L) R)/dX(t), an N x (N d) matrix (docs/science/gradients.md).
// jacobian_log_fro2 = log ||J_t||_F^2. Exact (metrics.jacobian_probes = 0): ||J_t||_F^2 = sum_i
// ||J_t^T e_i||^2, one reverse pass per output i with the cotangent e_i R^T. Hutchinson (K probes):
// ||J_t||_F^2 ~ (1/K) sum_k ||J_t^T u_k||^2, u_k ~ N(0, I_N) from the trial's stream kProbeStream,
// one reverse pass per probe with the cotangent u_k R^T.
// jacobian_log_spec2 = log ||J_t||_2^2 = log lambda_max(J_t J_t^T): the same N exact passes give the
// rows J_t^T e_i (dX(t), flattened) at every t; kept for a chunk of recorded layers at a time (at most
// jacobian_chunk_layers(c) of them, the passes repeated per chunk), then the N x N Gram matrix's
// largest eigenvalue. One set of passes serves both measures (the first chunk's gives ||J_t||_F^2).
// With metrics.readout = last_token, J_t = d(x_N(L) R)/dX(t) is the one row of output N - 1: one
// exact pass, and ||J_t||_2 = ||J_t||_F.
void record_jacobian(const ModelSpec& c, int length, int chunk_layers, const SegmentReplay& replay,
                     const BlockParams& params, const Vector& R, int trial, RunResults& r) {
  const int N = c.model.tokens, d = c.model.dim, K = c.metrics.jacobian_probes;
  const bool fro = wants(c, "jacobian_log_fro2"), spec = wants(c, "jacobian_log_spec2");
  const std::size_t S = r.layer_index.size();
  const std::size_t chunk = spec ? static_cast<std::size_t>(std::max(chunk_layers, 1)) : S;
  std::vector<double> sq(static_cast<std::size_t>(c.model.layers) + 1, 0.0);
  const std::size_t m_spec = spec ? info_index(r.token_info, "jacobian_log_spec2") : 0;
  const bool last = c.metrics.readout == Readout::last_token;  // (no probes then: the configuration refuses them)
  const int outputs = last ? 1 : N;  // the rows of J_t
  Matrix u(N, 1);
  std::vector<Matrix> rows;  // rows[k - first]: J_t, t = layer_index[k], one row per pass
  for (std::size_t first = 0; first < S; first += chunk) {
    const std::size_t end = std::min(first + chunk, S);
    if (spec) rows.assign(end - first, Matrix(outputs, static_cast<Eigen::Index>(N) * d));
    RandomStream probes(c.run.seed, static_cast<std::uint64_t>(trial), kProbeStream);
    for (int i = 0; i < (K > 0 ? K : outputs); ++i) {
      if (K > 0)
        probes.fill_normal(u);
      else {
        u.setZero();
        u(last ? N - 1 : i, 0) = 1.0;
      }
      const Matrix cot = u * R.transpose();
      stack_backward_segments(c.model.layers, length, replay, params, cot, [&](int t, const Matrix& dX) {
        if (first == 0) sq[static_cast<std::size_t>(t)] += dX.squaredNorm();
        if (!spec) return;
        const int col = r.column_of_layer[static_cast<std::size_t>(t)];
        if (col < 0 || static_cast<std::size_t>(col) < first || static_cast<std::size_t>(col) >= end) return;
        // Row i of J_t: dX(t) of the cotangent e_i R^T, in any fixed order of its N d entries.
        rows[static_cast<std::size_t>(col) - first].row(i) = Eigen::Map<const RowVector>(dX.data(), dX.size());
      });
    }
    for (std::size_t k = first; k < end && spec; ++k) {
      const Matrix& J = rows[k - first];
      const Matrix gram = J * J.transpose();
      const Eigen::SelfAdjointEigenSolver<Matrix> eig(gram, Eigen::EigenvaluesOnly);
      r.token[m_spec](trial, static_cast<Eigen::Index>(k)) = std::log(eig.eigenvalues().maxCoeff());
    }
  }
  if (!fro) return;
  if (K > 0)
    for (double& v : sq) v /= K;
  const std::size_t m = info_index(r.token_info, "jacobian_log_fro2");
  for (std::size_t t = 0; t < sq.size(); ++t)
    if (const int col = r.column_of_layer[t]; col >= 0) r.token[m](trial, col) = std::log(sq[t]);
}

// last_token_sensitivity: S_i(t) = ||d x_{N-1}(L) / d x_i(t)||_F for every token i (rows 0-based, the
// last one N-1), at every recorded layer t (docs/science/gradients.md). d reverse passes, the k-th
// from the cotangent e_{N-1} e_k^T (d x_{N-1,k}(L) / dX(t) is its dX(t)): S_i(t)^2 = sum_k ||row i of
// dX(t)||^2. Stored at column col * N + i of the measure's results (values_per_layer = N).
void record_last_token(const ModelSpec& c, int length, const SegmentReplay& replay, const BlockParams& params,
                       int trial, RunResults& r) {
  const int N = c.model.tokens, d = c.model.dim;
  std::vector<Vector> sq(static_cast<std::size_t>(c.model.layers) + 1, Vector::Zero(N));
  Matrix cot = Matrix::Zero(N, d);
  for (int k = 0; k < d; ++k) {
    cot.setZero();
    cot(N - 1, k) = 1.0;
    stack_backward_segments(c.model.layers, length, replay, params, cot, [&](int t, const Matrix& dX) {
      if (r.column_of_layer[static_cast<std::size_t>(t)] >= 0) sq[static_cast<std::size_t>(t)] += dX.rowwise().squaredNorm();
    });
  }
  const std::size_t m = info_index(r.token_info, "last_token_sensitivity");
  for (std::size_t t = 0; t < sq.size(); ++t)
    if (const int col = r.column_of_layer[t]; col >= 0)
      for (int i = 0; i < N; ++i) r.token[m](trial, static_cast<Eigen::Index>(col) * N + i) = std::sqrt(sq[t](i));
}

// jacobian_log_spec2_full = log ||J_t||_2^2 for the full Jacobian J_t = dX(L)/dX(t) (Nd x Nd) at every
// recorded layer t (docs/science/gradients.md): power iteration on J_t^T J_t (kernel/forward_mode.hpp),
// one JVP through blocks t .. L-1 and one VJP back per step, from a Gaussian start vector of the
// trial's own stream (seed, trial, kPowerStream), drawn afresh for each recorded layer in ascending
// order. The Rayleigh quotient is a lower bound of ||J_t||_2^2 converging from below.
void record_jacobian_full(const ModelSpec& c, int length, const SegmentReplay& replay, const BlockParams& params,
                          int trial, RunResults& r) {
  StackJacobian J(c.model.layers, length, replay, params);
  RandomStream start(c.run.seed, static_cast<std::uint64_t>(trial), kPowerStream);
  Matrix V0(c.model.tokens, c.model.dim);
  const std::size_t m = info_index(r.token_info, "jacobian_log_spec2_full");
  for (std::size_t k = 0; k < r.layer_index.size(); ++k) {
    start.fill_normal(V0);
    const PowerIteration p =
        jacobian_power_iteration(J, r.layer_index[k], V0, c.metrics.power_iterations, c.metrics.power_tolerance);
    r.token[m](trial, static_cast<Eigen::Index>(k)) = std::log(p.lambda);
  }
}

// jacobian_log_fro2_full = log ||J_t||_F^2 for the full Jacobian J_t = dX(L)/dX(t) (Nd x Nd) at every
// recorded layer t (docs/science/gradients.md), from reverse passes alone: exact (metrics.jacobian_probes
// = 0), the sum over the N d cotangents E_ij (one 1 at (i, j)) of ||J_t^T E_ij||^2; Hutchinson (K
// probes), (1/K) sum_k ||J_t^T U_k||^2 with U_k ~ N(0, I) N x d from the trial's stream kFullProbeStream.
// One pass gives J_t^T U at every t at once.
void record_jacobian_fro_full(const ModelSpec& c, int length, const SegmentReplay& replay, const BlockParams& params,
                              int trial, RunResults& r) {
  const int N = c.model.tokens, d = c.model.dim, K = c.metrics.jacobian_probes;
  std::vector<double> sq(static_cast<std::size_t>(c.model.layers) + 1, 0.0);
  RandomStream probes(c.run.seed, static_cast<std::uint64_t>(trial), kFullProbeStream);
  Matrix U(N, d);
  for (int k = 0; k < (K > 0 ? K : N * d); ++k) {
    if (K > 0) {
      probes.fill_normal(U);
    } else {
      U.setZero();
      U(k / d, k % d) = 1.0;
    }
    stack_backward_segments(c.model.layers, length, replay, params, U,
                            [&](int t, const Matrix& dX) { sq[static_cast<std::size_t>(t)] += dX.squaredNorm(); });
  }
  const std::size_t m = info_index(r.token_info, "jacobian_log_fro2_full");
  for (std::size_t t = 0; t < sq.size(); ++t)
    if (const int col = r.column_of_layer[t]; col >= 0) r.token[m](trial, col) = std::log(K > 0 ? sq[t] / K : sq[t]);
}

// The gradient measures (docs/science/gradients.md): the reverse pass from dL/dX(L) = 1 R^T (or e_N R^T,
// metrics.readout = last_token) over
// the block inputs (replayed segment by segment), ||dL/dX(t)||_F at the recorded layers, the weight
// gradients' norms at the recorded attention layers.
void record_gradients(const ModelSpec& c, int length, int chunk_layers, const SegmentReplay& replay,
                      const BlockParams& params, int trial, RunResults& r) {
  const Vector R = readout(c, trial);
  const Matrix dXL = readout_cotangent(c.model.tokens, R, c.metrics.readout);
  // The block-gradient measures the registry declares (grad_wq_norm, ...), by their functions.
  const auto on_block = [&](int t, const BlockGrads& g) {
    const int acol = r.column_of_attention_layer[static_cast<std::size_t>(t)];
    if (acol < 0) return;
    for (std::size_t i = 0; i < r.attention_defs.size(); ++i)
      if (const BlockGradientFn f = r.attention_defs[i]->block_gradient) r.attention[i](trial, acol) = f(g);
  };
  const bool norms = wants(c, "grad_x_norm");
  const std::size_t m = norms ? info_index(r.token_info, "grad_x_norm") : 0;
  const auto on_dx = [&](int t, const Matrix& dX) {
    if (const int col = r.column_of_layer[static_cast<std::size_t>(t)]; norms && col >= 0) r.token[m](trial, col) = dX.norm();
  };
  stack_backward_segments(c.model.layers, length, replay, params, dXL, on_dx, on_block);
  if (wants(c, "jacobian_log_fro2") || wants(c, "jacobian_log_spec2"))
    record_jacobian(c, length, chunk_layers, replay, params, R, trial, r);
  if (wants(c, "last_token_sensitivity")) record_last_token(c, length, replay, params, trial, r);
  if (wants(c, "jacobian_log_spec2_full")) record_jacobian_full(c, length, replay, params, trial, r);
  if (wants(c, "jacobian_log_fro2_full")) record_jacobian_fro_full(c, length, replay, params, trial, r);
}

// The signal-propagation measures of a trial (docs/science/gradients.md): update_size after each
// block; for the gradient measures, what the reverse pass needs: every block's input and weights
// (segment length L), or a checkpoint every `length` blocks (the input, the trial's stream and the
// weight sampler before the block's weights are drawn), from which replay() recomputes a segment
// with the forward's own functions, exactly.
struct SignalRecorder {
  struct Checkpoint {
    Matrix X;
    RandomStream rng;
    WeightSampler sampler;
    std::optional<RandomStream> dropout;
    std::optional<RandomStream> noise;  // dynamics.noise: the noise stream before block t's draw
  };
  const ModelSpec& c;
  const bool update = wants_pass(c, MeasurePass::update), gradients = wants_gradients(c);
  const int length;
  BlockTape tape;  // every block's, when stored whole
  std::vector<Checkpoint> checkpoints;
  const int chunk_layers;  // jacobian_log_spec2: recorded layers per set of N reverse passes
  SignalRecorder(const ModelSpec& spec, int segment, int chunk)
      : c(spec), length(segment > 0 ? segment : gradient_segment_length(spec)),
        chunk_layers(chunk > 0 ? chunk : jacobian_chunk_layers(spec)) {}
  bool stores_all() const { return length >= c.model.layers; }
  static const RandomStream* dropout_stream(const BlockParams& params) {
    return params.layer.dropout ? params.layer.dropout->rng : nullptr;
  }
  static const RandomStream* noise_stream(const BlockParams& params) {
    return params.noise ? params.noise->rng : nullptr;
  }
  void before_weights(int t, const Matrix& X, const RandomStream& rng, const WeightSampler& sampler,
                      const BlockParams& params) {
    if (!gradients || stores_all() || t % length != 0) return;
    const RandomStream* d = dropout_stream(params);
    const RandomStream* z = noise_stream(params);
    checkpoints.push_back(Checkpoint{X, rng, sampler, d ? std::optional<RandomStream>(*d) : std::nullopt,
                                     z ? std::optional<RandomStream>(*z) : std::nullopt});
  }
  void before_block(const Matrix& X, const LayerWeights& w, const BlockParams& params) {
    if (!gradients || !stores_all()) return;
    tape.inputs.push_back(X);
    tape.weights.push_back(w);
    if (const RandomStream* d = dropout_stream(params)) tape.dropout.push_back(*d);
    if (const RandomStream* z = noise_stream(params)) tape.noise.push_back(*z);
  }
  // The blocks [b, e): the stored ones, or recomputed from the checkpoint at b (with dropout, from
  // the dropout stream it kept, each block's stream recorded on the way).
  void replay(int b, int e, const BlockParams& params, BlockTape& out) const {
    const auto n = static_cast<std::size_t>(e - b), first = static_cast<std::size_t>(b);
    if (stores_all()) {
      out.inputs.assign(tape.inputs.begin() + first, tape.inputs.begin() + first + n);
      out.weights.assign(tape.weights.begin() + first, tape.weights.begin() + first + n);
      out.dropout.clear();
      if (!tape.dropout.empty()) out.dropout.assign(tape.dropout.begin() + first, tape.dropout.begin() + first + n);
      out.noise.clear();
      if (!tape.noise.empty()) out.noise.assign(tape.noise.begin() + first, tape.noise.begin() + first + n);
      return;
    }
    const Checkpoint& cp = checkpoints[first / static_cast<std::size_t>(length)];
    RandomStream rng = cp.rng;
    WeightSampler sampler = cp.sampler;
    std::optional<RandomStream> drop_rng = cp.dropout;
    std::optional<RandomStream> noise_rng = cp.noise;  // dynamics.noise: replayed after each block
    BlockParams replayed = params;
    Dropout drop;
    if (drop_rng) {
      drop = *params.layer.dropout;
      drop.rng = &*drop_rng;
      replayed.layer.dropout = &drop;
    }
    Matrix X = cp.X, X_next(X.rows(), X.cols());
    BlockWorkspace ws(static_cast<int>(X.rows()), static_cast<int>(X.cols()), c.model.key_dim);
    std::optional<BlockWorkspaceT<float>> ws_float;  // run.precision = float32: the float forward, as run_trial
    if (params.single) ws_float.emplace(static_cast<int>(X.rows()), static_cast<int>(X.cols()), c.model.key_dim);
    out.inputs.resize(n);
    out.weights.resize(n);
    out.dropout.clear();
    out.noise.clear();
    for (std::size_t k = 0; k < n; ++k) {
      out.weights[k] = sampler.layer(b + static_cast<int>(k), rng);
      out.inputs[k] = X;
      if (drop_rng) out.dropout.push_back(*drop_rng);
      if (noise_rng) out.noise.push_back(*noise_rng);
      if (params.single) {
        LayerWeightsT<float> wf;
        cast_weights(out.weights[k], wf);
        MatrixF Xf = X.cast<float>(), Xf_next;
        transformer_block(Xf, wf, at_layer(replayed, b + static_cast<int>(k)), *ws_float, Xf_next);
        X_next = Xf_next.cast<double>();
      } else {
        transformer_block(X, out.weights[k], at_layer(replayed, b + static_cast<int>(k)), ws, X_next);
      }
      if (noise_rng) {  // as run_trial: the noise step after the block, then float32's rounding
        apply_dynamics_noise(X_next, params.noise->scale, *noise_rng, *params.noise->norm);
        if (params.single) X_next = X_next.cast<float>().cast<double>();
      }
      X.swap(X_next);
    }
  }
  void after_block(const Matrix& X, const Matrix& X_next, int t, int trial, RunResults& r) const {
    if (!update) return;
    if (const int acol = r.column_of_attention_layer[static_cast<std::size_t>(t)]; acol >= 0)
      for (std::size_t i = 0; i < r.attention_defs.size(); ++i)
        if (const MeasureDef& d = *r.attention_defs[i]; d.pass == MeasurePass::update)
          r.attention[i](trial, acol) = d.update(X, X_next);
  }
  void finish(const BlockParams& params, int trial, RunResults& r) const {
    if (!gradients) return;
    const SegmentReplay segment = [&](int b, int e, BlockTape& out) { replay(b, e, params, out); };
    record_gradients(c, stores_all() ? c.model.layers : length, chunk_layers, segment, params, trial, r);
  }
};

}  // namespace

namespace {
// Between layers: false when the run is cancelled, else the layer is counted (a progress per layer).
bool next_layer(const std::atomic<bool>* cancel, LayerCount* layers) {
  if (cancel && cancel->load(std::memory_order_relaxed)) return false;
  if (layers) layers->fetch_add(1, std::memory_order_relaxed);
  return true;
}
}  // namespace

bool run_trial(const EngineSetup& s, int trial, RunResults& r, const std::atomic<bool>* cancel, LayerCount* layers) {
  const ModelSpec& c = s.config;
  const int N = c.model.tokens, d = c.model.dim, L = c.model.layers;
  const auto ti = static_cast<std::size_t>(trial);
  RandomStream rng(c.run.seed, static_cast<std::uint64_t>(trial));
  Matrix X = initial_tokens(c, s.files, trial, rng);
  add_initial_noise(c, trial, X);
  DynamicsNoise noise(c, trial);
  Matrix X_next(N, d);
  WeightSampler sampler(c, s.files);
  sampler.begin_trial(rng);
  const Normalization norm = Normalization::from_config(c);
  // Optional attention measures (docs/science/peers.md): of the head-averaged attention and of the product of them.
  const bool want_product = wants_pass(c, MeasurePass::attention_product);
  const bool want_attention = want_product || wants_pass(c, MeasurePass::attention);
  SignalRecorder signal(c, s.gradient_segment, s.jacobian_chunk);  // docs/science/gradients.md
  Matrix product = want_product ? Matrix(Matrix::Identity(N, N)) : Matrix();
  BlockParams params = block_params(c, &s.mask, &norm);
  const LayerSettings per_layer = layer_settings(c);  // model.layer_overrides, read by at_layer(params, t)
  if (!per_layer.empty()) params.per_layer = &per_layer;
  params.layer.keep_attention = want_attention || c.output.attention;
  const NoiseStep noise_step{noise.scale(), &norm, noise.stream()};  // dynamics.noise, for the reverse pass
  if (noise.active()) params.noise = &noise_step;
  if (c.output.attention) r.attention_matrices[ti].clear();
  RandomStream dropout_rng(c.run.seed, static_cast<std::uint64_t>(trial), kDropoutStream);
  const Dropout dropout{c.dropout.attention, c.dropout.output, &dropout_rng};
  if (c.dropout.attention > 0.0 || c.dropout.output > 0.0) params.layer.dropout = &dropout;
  // run.precision = float32: the block computes in float (transformer_block's float overload) on the tokens
  // and weights rounded to float; X holds the float tokens exactly, in double, for the measures.
  const bool single = c.run.precision == Precision::float32;
  params.single = single;  // the reverse pass in float too (block_backward)
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
    if (!next_layer(cancel, layers)) return false;
    if (!all_finite(X)) {
      r.nonfinite_layer[ti] = t;
      break;
    }
    const int col = r.column_of_layer[static_cast<std::size_t>(t)];  // output.schedule
    if (col >= 0) {
      const TokenMeasures m = measure_tokens(X, opt, sigma);
      record_tokens(c, m, X, sigma, trial, col, r);
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
    signal.before_weights(t, X, rng, sampler, params);
    const LayerWeights& w = sampler.layer(t, rng);
    signal.before_block(X, w, params);
    LayerReport rep;
    if (single) {
      cast_weights(w, w_float);
      X_float = X.cast<float>();
      rep = transformer_block(X_float, w_float, at_layer(params, t), *ws_float, X_next_float);
      X_next = X_next_float.cast<double>();
    } else {
      rep = transformer_block(X, w, at_layer(params, t), ws, X_next);
    }
    if (noise.active()) {  // after the deterministic step (kernel/noise.hpp)
      rep.degenerate_rows += noise.apply(X_next, norm);
      if (single) X_next = X_next.cast<float>().cast<double>();
    }
    if (want_product) product = attention_mean * product;
    if (const int acol = r.column_of_attention_layer[static_cast<std::size_t>(t)]; acol >= 0) {
      record_attention(c, rep, attention_mean, product, trial, acol, r);
      if (c.output.attention) r.attention_matrices[ti].push_back(attention_mean);
    }
    signal.after_block(X, X_next, t, trial, r);
    r.degenerate_total[ti] += rep.degenerate_rows;
    X.swap(X_next);
    opt.max_rank = s.max_rank;
  }
  if (r.nonfinite_layer[ti] < 0) signal.finish(params, trial, r);
  // Snapshots of layers never reached (non-finite tokens) are stored as NaN.
  while (!r.snapshots.empty() && r.snapshots[ti].size() < snap_layers.size())
    r.snapshots[ti].push_back(Matrix::Constant(N, d, std::numeric_limits<double>::quiet_NaN()));
  while (!r.attention_matrices.empty() && r.attention_matrices[ti].size() < r.attention_layer_index.size())
    r.attention_matrices[ti].push_back(Matrix::Constant(N, N, std::numeric_limits<double>::quiet_NaN()));
  return true;
}

TrialGradients trial_gradients(const EngineSetup& s, int trial, const Matrix& cotangent) {
  const ModelSpec& c = s.config;
  const int N = c.model.tokens, d = c.model.dim, L = c.model.layers;
  if (cotangent.rows() != N || cotangent.cols() != d)
    throw UsageError("gradients: the cotangent dL/dX(L) must be [N, d] = [" + std::to_string(N) + ", " +
                     std::to_string(d) + "], got [" + std::to_string(cotangent.rows()) + ", " +
                     std::to_string(cotangent.cols()) + "]");
  RandomStream rng(c.run.seed, static_cast<std::uint64_t>(trial));  // as run_trial
  Matrix X = initial_tokens(c, s.files, trial, rng);
  add_initial_noise(c, trial, X);
  WeightSampler sampler(c, s.files);
  sampler.begin_trial(rng);
  const Normalization norm = Normalization::from_config(c);
  BlockParams params = block_params(c, &s.mask, &norm);
  const LayerSettings per_layer = layer_settings(c);  // model.layer_overrides, read by at_layer(params, t)
  if (!per_layer.empty()) params.per_layer = &per_layer;
  RandomStream dropout_rng(c.run.seed, static_cast<std::uint64_t>(trial), kDropoutStream);
  const Dropout dropout{c.dropout.attention, c.dropout.output, &dropout_rng};
  if (c.dropout.attention > 0.0 || c.dropout.output > 0.0) params.layer.dropout = &dropout;
  DynamicsNoise noise(c, trial);  // dynamics.noise: the step after each block, as run_trial
  const NoiseStep noise_step{noise.scale(), &norm, noise.stream()};
  if (noise.active()) params.noise = &noise_step;
  BlockWorkspace ws(N, d, c.model.key_dim);
  Matrix X_next(N, d);
  // run.precision = float32: the float forward of run_trial and the float reverse pass (block_backward).
  params.single = c.run.precision == Precision::float32;
  std::optional<BlockWorkspaceT<float>> ws_float;
  if (params.single) {
    ws_float.emplace(N, d, c.model.key_dim);
    X = X.cast<float>().cast<double>();
  }
  BlockTape tape;
  for (int t = 0; t < L; ++t) {
    tape.weights.push_back(sampler.layer(t, rng));
    tape.inputs.push_back(X);
    if (params.layer.dropout) tape.dropout.push_back(dropout_rng);
    if (noise.active()) tape.noise.push_back(*noise.stream());
    if (params.single) {
      LayerWeightsT<float> wf;
      cast_weights(tape.weights.back(), wf);
      MatrixF Xf = X.cast<float>(), Xf_next;
      transformer_block(Xf, wf, at_layer(params, t), *ws_float, Xf_next);
      X_next = Xf_next.cast<double>();
    } else {
      transformer_block(X, tape.weights.back(), at_layer(params, t), ws, X_next);
    }
    if (noise.active()) {
      noise.apply(X_next, norm);
      if (params.single) X_next = X_next.cast<float>().cast<double>();
    }
    X.swap(X_next);
  }
  TrialGradients out;
  out.output = X;
  out.blocks.resize(static_cast<std::size_t>(L));
  out.dX.resize(static_cast<std::size_t>(L) + 1);
  stack_backward_segments(
      L, std::max(L, 1), [&](int, int, BlockTape& seg) { seg = tape; }, params, cotangent,
      [&](int t, const Matrix& dX) { out.dX[static_cast<std::size_t>(t)] = dX; },
      [&](int t, const BlockGrads& g) { out.blocks[static_cast<std::size_t>(t)] = g; });
  return out;
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
        if (!run_trial(s, trial, r, ctl.cancel, ctl.layers_done)) return;  // each trial writes only its own rows
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
                          const std::function<void(int, int)>& progress, std::atomic<long long>* layers_done) {
  RunResults r = allocate_results(s);
  RunControl ctl;
  ctl.cancel = cancel;
  ctl.progress = progress;
  ctl.layers_done = layers_done;
  run_trials(s, threads, r, {}, ctl);
  return r;
}

}  // namespace rcsim
