#include "kernel/trial/derivative_measures.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernel/support/errors.hpp"
#include "kernel/block/forward_mode.hpp"
#include "kernel/model/random.hpp"

namespace rcsim {

bool wants_derivative(const ModelSpec& c, DerivativePass pass) {
  for (const MeasureDef& d : measure_registry())
    if (d.derivative == pass && measure_wanted(c, d)) return true;
  return false;
}

std::size_t derivative_column(const RunResults& r, DerivativePass pass) {
  for (std::size_t i = 0; i < r.token_defs.size(); ++i)
    if (r.token_defs[i]->derivative == pass) return i;
  throw std::logic_error("a derivative measure is not allocated");
}

bool wants_gradients(const ModelSpec& c) { return wants_pass(c, MeasurePass::gradients); }


void check_derivative_measures(const ModelSpec& c) {
  if (wants_derivative(c, DerivativePass::jacobian_spec) && c.metrics.jacobian_probes > 0)
    throw UsageError("output.measures: jacobian_log_spec2 is computed exactly (N reverse passes) and has no "
                     "Hutchinson estimate; metrics.jacobian_probes = " + std::to_string(c.metrics.jacobian_probes) +
                     " is allowed only without it (set metrics.jacobian_probes = 0, or leave jacobian_log_spec2 out)");
  if (wants_derivative(c, DerivativePass::full_spectral) && c.run.precision == Precision::float32)
    throw UsageError("output.measures: jacobian_log_spec2_full (the forward-mode pass) is computed in float64 only; "
                     "run.precision = float32 is not supported with it (set run.precision = float64, or leave "
                     "jacobian_log_spec2_full out)");
}

int jacobian_chunk_layers(const ModelSpec& c) {
  const double per_layer = 8.0 * c.model.tokens * c.model.tokens * static_cast<double>(c.model.dim);
  const double fit = std::floor(kGradientStoreBytes / per_layer);
  return fit >= c.model.layers + 1.0 ? c.model.layers + 1 : std::max(1, static_cast<int>(fit));
}

namespace {

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
  const bool fro = wants_derivative(c, DerivativePass::jacobian_fro), spec = wants_derivative(c, DerivativePass::jacobian_spec);
  const std::size_t S = r.layer_index.size();
  const std::size_t chunk = spec ? static_cast<std::size_t>(std::max(chunk_layers, 1)) : S;
  std::vector<double> sq(static_cast<std::size_t>(c.model.layers) + 1, 0.0);
  const std::size_t m_spec = spec ? derivative_column(r, DerivativePass::jacobian_spec) : 0;
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
  const std::size_t m = derivative_column(r, DerivativePass::jacobian_fro);
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
  const std::size_t m = derivative_column(r, DerivativePass::last_token);
  for (std::size_t t = 0; t < sq.size(); ++t)
    if (const int col = r.column_of_layer[t]; col >= 0)
      for (int i = 0; i < N; ++i) r.token[m](trial, static_cast<Eigen::Index>(col) * N + i) = std::sqrt(sq[t](i));
}

// jacobian_log_spec2_full = log ||J_t||_2^2 for the full Jacobian J_t = dX(L)/dX(t) (Nd x Nd) at every
// recorded layer t (docs/science/gradients.md): power iteration on J_t^T J_t (kernel/block/forward_mode.hpp),
// one JVP through blocks t .. L-1 and one VJP back per step, from a Gaussian start vector of the
// trial's own stream (seed, trial, kPowerStream), drawn afresh for each recorded layer in ascending
// order. The Rayleigh quotient is a lower bound of ||J_t||_2^2 converging from below.
void record_jacobian_full(const ModelSpec& c, int length, const SegmentReplay& replay, const BlockParams& params,
                          int trial, RunResults& r) {
  StackJacobian J(c.model.layers, length, replay, params);
  RandomStream start(c.run.seed, static_cast<std::uint64_t>(trial), kPowerStream);
  Matrix V0(c.model.tokens, c.model.dim);
  const std::size_t m = derivative_column(r, DerivativePass::full_spectral);
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
  const std::size_t m = derivative_column(r, DerivativePass::full_fro);
  for (std::size_t t = 0; t < sq.size(); ++t)
    if (const int col = r.column_of_layer[t]; col >= 0) r.token[m](trial, col) = std::log(K > 0 ? sq[t] / K : sq[t]);
}

}  // namespace

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
  const bool norms = wants_derivative(c, DerivativePass::readout_gradient);
  const std::size_t m = norms ? derivative_column(r, DerivativePass::readout_gradient) : 0;
  const auto on_dx = [&](int t, const Matrix& dX) {
    if (const int col = r.column_of_layer[static_cast<std::size_t>(t)]; norms && col >= 0) r.token[m](trial, col) = dX.norm();
  };
  stack_backward_segments(c.model.layers, length, replay, params, dXL, on_dx, on_block);
  if (wants_derivative(c, DerivativePass::jacobian_fro) || wants_derivative(c, DerivativePass::jacobian_spec))
    record_jacobian(c, length, chunk_layers, replay, params, R, trial, r);
  if (wants_derivative(c, DerivativePass::last_token)) record_last_token(c, length, replay, params, trial, r);
  if (wants_derivative(c, DerivativePass::full_spectral)) record_jacobian_full(c, length, replay, params, trial, r);
  if (wants_derivative(c, DerivativePass::full_fro)) record_jacobian_fro_full(c, length, replay, params, trial, r);
}

}  // namespace rcsim
