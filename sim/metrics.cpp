#include "metrics.hpp"

#include <cmath>
#include <limits>

#include <Eigen/SVD>

namespace rcsim {

double token_similarity(const Eigen::Ref<const Matrix>& X) {
  const RowVector gamma = X.colwise().mean();
  // Scaled (stable) norm: mu may fall far below 1e-154, where a plain sum of squares underflows.
  return (X.rowwise() - gamma).stableNorm();
}

Vector singular_values(const Eigen::Ref<const Matrix>& X) {
  Eigen::BDCSVD<Matrix> svd(X);  // values only
  return svd.singularValues();
}

double rank_tolerance(const Vector& sigma, double rtol, double atol) {
  const double smax = sigma.size() ? sigma(0) : 0.0;
  return std::max(atol, rtol * smax);
}

int numerical_rank(const Vector& sigma, double rtol, double atol) {
  const double tol = rank_tolerance(sigma, rtol, atol);
  int r = 0;
  for (Eigen::Index i = 0; i < sigma.size(); ++i) r += sigma(i) > tol ? 1 : 0;
  return r;
}

double rank_one_residual(const Vector& sigma) {
  if (sigma.size() == 0 || sigma(0) == 0.0) return 0.0;
  const double total = sigma.stableNorm();
  const double tail = sigma.size() > 1 ? sigma.tail(sigma.size() - 1).stableNorm() : 0.0;
  return tail / total;
}

double stable_rank(const Vector& sigma) {
  if (sigma.size() == 0 || sigma(0) == 0.0) return 0.0;
  const Vector s = sigma / sigma(0);
  return s.squaredNorm();
}

double cos_abs_mean(const Eigen::Ref<const Matrix>& X) {
  const Eigen::Index n = X.rows();
  Matrix U(n, X.cols());
  Eigen::Index k = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const double r = X.row(i).stableNorm();
    if (r > 0.0) U.row(k++) = X.row(i) / r;
  }
  if (k < 2) return std::numeric_limits<double>::quiet_NaN();
  const Matrix G = U.topRows(k) * U.topRows(k).transpose();
  const double sum_abs = G.cwiseAbs().sum() - G.diagonal().cwiseAbs().sum();
  return sum_abs / static_cast<double>(k * (k - 1));
}

TokenMeasures measure_tokens(const Eigen::Ref<const Matrix>& X, const MeasureOptions& opt, Vector& sigma) {
  TokenMeasures m;
  sigma = singular_values(X);
  m.fro_norm = X.stableNorm();
  m.mu = token_similarity(X);
  m.mu_rel = m.fro_norm > 0.0 ? m.mu / m.fro_norm : 0.0;
  const Eigen::Index k = sigma.size();
  m.sigma_max = k ? sigma(0) : 0.0;
  m.sigma_min = k ? sigma(k - 1) : 0.0;
  m.rank = numerical_rank(sigma, opt.rank_rtol, opt.rank_atol);
  m.rank_one_residual = rank_one_residual(sigma);
  m.stable_rank = stable_rank(sigma);
  m.cos_abs_mean = cos_abs_mean(X);
  const int idx = std::min<int>(opt.max_rank, static_cast<int>(k));
  m.sigma_at_max_rank = idx >= 1 ? sigma(idx - 1) : 0.0;
  return m;
}

}  // namespace rcsim
