#include "kernel/particles.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <utility>

namespace rcsim {

double hardmax_tie_tolerance(bool single) { return single ? 1e-5 : 1e-12; }

namespace {
template <class T>
void hardmax_impl(Eigen::Ref<MatrixT<T>> S, const MaskMatrix& mask) {
  const T tol = static_cast<T>(hardmax_tie_tolerance(sizeof(T) == sizeof(float)));
  for (Eigen::Index i = 0; i < S.rows(); ++i) {
    T m = -std::numeric_limits<T>::infinity();
    for (Eigen::Index j = 0; j < S.cols(); ++j)
      if (mask(i, j)) m = std::max(m, S(i, j));
    const T cut = m - tol * std::max(std::abs(m), T(1));  // S_ij >= m_i - tol max(|m_i|, 1)
    int count = 0;
    for (Eigen::Index j = 0; j < S.cols(); ++j) {
      const bool top = mask(i, j) && S(i, j) >= cut;
      count += top ? 1 : 0;
      S(i, j) = top ? T(1) : T(0);
    }
    if (count > 0) S.row(i) /= static_cast<T>(count);  // A_ij = 1 / |S_i|
  }
}
}  // namespace

void hardmax_weights(Eigen::Ref<Matrix> S, const MaskMatrix& mask) { hardmax_impl<double>(S, mask); }
void hardmax_weights(Eigen::Ref<MatrixF> S, const MaskMatrix& mask) { hardmax_impl<float>(S, mask); }

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
