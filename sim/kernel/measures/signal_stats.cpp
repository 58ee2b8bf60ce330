#include "kernel/measures/signal_stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace rcsim {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

double cos_mean(const Eigen::Ref<const Matrix>& X) {
  std::vector<Eigen::Index> rows;
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    if (X.row(i).squaredNorm() > 0.0) rows.push_back(i);
  const auto n = static_cast<Eigen::Index>(rows.size());
  if (n < 2) return kNaN;
  Matrix U(n, X.cols());
  for (Eigen::Index k = 0; k < n; ++k) U.row(k) = X.row(rows[static_cast<std::size_t>(k)]).normalized();
  const Matrix C = U * U.transpose();  // C_ij = cos(x_i, x_j)
  const double off = C.sum() - C.trace();
  return off / static_cast<double>(n * (n - 1));
}

double gram_q(const Eigen::Ref<const Matrix>& X) {
  return X.squaredNorm() / (static_cast<double>(X.rows()) * static_cast<double>(X.cols()));
}

double gram_p(const Eigen::Ref<const Matrix>& X) {
  const double n = static_cast<double>(X.rows()), d = static_cast<double>(X.cols());
  if (X.rows() < 2) return kNaN;
  // sum_{i != j} <x_i, x_j> = ||1^T X||^2 - sum_i ||x_i||^2
  const double off = X.colwise().sum().squaredNorm() - X.squaredNorm();
  return off / (n * (n - 1.0) * d);
}

double massive_ratio(const Eigen::Ref<const Matrix>& X) {
  std::vector<double> a;
  a.reserve(static_cast<std::size_t>(X.size()));
  for (Eigen::Index j = 0; j < X.cols(); ++j)
    for (Eigen::Index i = 0; i < X.rows(); ++i) a.push_back(std::abs(X(i, j)));
  if (a.empty()) return kNaN;
  const std::size_t m = a.size() / 2;
  std::nth_element(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(m), a.end());
  double median = a[m];
  if (a.size() % 2 == 0) median = 0.5 * (median + *std::max_element(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(m)));
  const double mx = *std::max_element(a.begin(), a.end());
  return mx / median;  // 0 / 0 = NaN, x / 0 = inf
}

double update_size(const Eigen::Ref<const Matrix>& X, const Eigen::Ref<const Matrix>& X_next) {
  const double n = X.norm();
  if (!(n > 0.0)) return kNaN;
  return (X_next - X).norm() / n;
}

}  // namespace rcsim
