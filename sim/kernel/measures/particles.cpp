#include "kernel/measures/particles.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <utility>

namespace rcsim {

double interaction_energy(const Eigen::Ref<const Matrix>& X, double beta) {
  const Eigen::Index n = X.rows();
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  const Matrix G = X * X.transpose();  // <x_i, x_j>
  double sum = 0.0;
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i < n; ++i) sum += std::exp(beta * (G(i, j) - 1.0));
  const double N = static_cast<double>(n);
  return sum / (2.0 * beta * N * N);  // (1 / (2 beta N^2)) sum_ij exp(beta (<x_i, x_j> - 1))
}

namespace {
// (max over k = 1..max_k of |(1/N) sum_j exp(i k theta_j)|, the smallest k attaining it); NaN for d != 2.
std::pair<double, double> leading_mode(const Eigen::Ref<const Matrix>& X, int max_k) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (X.cols() != 2 || X.rows() == 0) return {nan, nan};
  double best = 0.0, best_k = 1.0;
  for (int k = 1; k <= max_k; ++k) {
    std::complex<double> s(0.0, 0.0);
    for (Eigen::Index j = 0; j < X.rows(); ++j) {
      const double theta = std::atan2(X(j, 1), X(j, 0));
      s += std::polar(1.0, k * theta);  // exp(i k theta_j)
    }
    const double m = std::abs(s) / static_cast<double>(X.rows());
    if (m > best + 1e-12) {  // a tie within 1e-12 keeps the smaller k (c_2 = c_4 = 1 for two antipodal groups)
      best = m;
      best_k = k;
    }
  }
  return {best, best_k};
}
}  // namespace

double fourier_mode(const Eigen::Ref<const Matrix>& X, int max_k) { return leading_mode(X, max_k).first; }
double fourier_k(const Eigen::Ref<const Matrix>& X, int max_k) { return leading_mode(X, max_k).second; }

}  // namespace rcsim
