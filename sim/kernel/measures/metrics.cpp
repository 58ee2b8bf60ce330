#include "kernel/measures/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <Eigen/SVD>

// LAPACK (reference or optimised; only the O(k^2) bidiagonal solver is used).
extern "C" void dlasq1_(const int* n, double* d, double* e, double* work, int* info);

namespace rcsim {

namespace {
// ||A||_F: the plain sum of squares when it neither underflows nor overflows, else the scaled
// (stable) norm. mu may fall far below 1e-154, where a plain sum of squares underflows.
template <typename Derived>
double frobenius(const Eigen::MatrixBase<Derived>& A) {
  const double sq = A.squaredNorm();
  if (sq >= std::numeric_limits<double>::min() && sq <= std::numeric_limits<double>::max()) return std::sqrt(sq);
  return A.stableNorm();
}

// Singular values of the upper bidiagonal matrix (diag, super) by LAPACK's dqds (dlasq1: high
// relative accuracy, O(k^2)). Returns false if it did not converge.
bool bidiagonal_singular_values(Vector& diag, Vector& super, Vector& work) {
  const int k = static_cast<int>(diag.size());
  work.resize(4 * k);
  int info = 0;
  dlasq1_(&k, diag.data(), super.data(), work.data(), &info);
  return info == 0;
}
}  // namespace

bool all_finite(const Eigen::Ref<const Matrix>& X) { return (X.array() * 0.0).sum() == 0.0; }

double token_similarity(const Eigen::Ref<const Matrix>& X) {
  const RowVector gamma = X.colwise().mean();
  return frobenius(X.rowwise() - gamma);
}

int qr_block_size(Eigen::Index k) { return k <= 32 ? 48 : 16; }

Vector singular_values(const Eigen::Ref<const Matrix>& X) {
  // Work on the tall orientation (singular values of X and X^T are the same).
  const bool tall = X.rows() >= X.cols();
  const Eigen::Index m = tall ? X.rows() : X.cols(), k = tall ? X.cols() : X.rows();
  if (k == 0) return Vector();
  // Scale by a power of two (exact) so that the largest entry is in [0.5, 1): the Householder
  // reflections square entries, which would under- or overflow far from 1.
  const double max_abs = X.cwiseAbs().maxCoeff();
  if (max_abs == 0.0) return Vector::Zero(k);
  int e = 0;
  std::frexp(max_abs, &e);
  const double to_unit = std::isfinite(max_abs) ? std::ldexp(1.0, -e) : 1.0;
  // Work storage kept per thread: a layer allocates nothing once the sizes are known (freeing
  // large blocks made glibc return memory to the system and fault it back in at every layer).
  thread_local Matrix A, R;
  thread_local Vector h_coeffs, temp;
  using Bidiagonalization = Eigen::internal::UpperBidiagonalization<Matrix>;
  thread_local std::optional<Bidiagonalization> bidiag;  // k > kUnblocked only; sized by its constructor
  thread_local Vector diag, super, work;
  if (3 * m >= 5 * k) {
    // Householder QR first (2 m k^2 flops), then the k x k triangle: cheaper than bidiagonalising
    // the m x k matrix (4 m k^2) when m >= 5k/3 (LAPACK's dgesdd does the same). X = Q R, with Q
    // orthonormal columns, so R has the singular values of X. Eigen's blocked Householder QR
    // (what HouseholderQR::compute runs) with panels of qr_block_size(k) columns.
    if (tall)
      A = X * to_unit;
    else
      A = X.transpose() * to_unit;
    h_coeffs.resize(k);
    temp.resize(std::max(m, k) + 1);
    Eigen::internal::householder_qr_inplace_blocked<Matrix, Vector>::run(A, h_coeffs, qr_block_size(k), temp.data());
    R = A.topRows(k).triangularView<Eigen::Upper>();
  } else if (tall) {
    R = X * to_unit;
  } else {
    R = X.transpose() * to_unit;
  }
  // Householder bidiagonalisation (backward stable), then the bidiagonal's values. Up to
  // k = 128 Eigen's unblocked variant is 10-30% faster than its blocked one (measured at
  // k = 64 and 128); it runs in place on R (the same function UpperBidiagonalization::
  // computeUnblocked calls on its copy). Which variant runs depends on k only, never on the
  // thread's history.
  constexpr Eigen::Index kUnblocked = 128;
  diag.resize(k);
  super.setZero(k);
  if (k <= kUnblocked) {
    temp.resize(std::max(m, k) + 1);
    Eigen::internal::upperbidiagonalization_inplace_unblocked(R, diag.data(), super.data(), temp.data());
  } else {
    if (!bidiag || bidiag->householder().cols() != k)
      bidiag.emplace(R);  // sizes (the constructor also computes, blocked)
    else
      bidiag->compute(R);
    auto& B = const_cast<Bidiagonalization::BidiagonalType&>(bidiag->bidiagonal());
    diag = B.diagonal<0>();
    super.head(k - 1) = B.diagonal<1>();
  }
  super(k - 1) = 0.0;
  if (std::isfinite(diag.sum() + super.sum()) && bidiagonal_singular_values(diag, super, work)) return diag / to_unit;
  Eigen::BDCSVD<Matrix> svd(X);  // non-finite input or no convergence: Eigen's divide and conquer
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
  // Row norms, vectorised over rows; a row whose sum of squares under- or overflows gets the
  // scaled norm.
  // Work storage local to the call (freed for the next layer's matrices: at N = 65,536 one N x d
  // matrix is 32 MiB); the allocation is negligible against the k^2 d products.
  Vector norms = X.rowwise().squaredNorm();
  Matrix U, G;
  for (Eigen::Index i = 0; i < n; ++i) {
    const double sq = norms(i);
    norms(i) = sq >= std::numeric_limits<double>::min() && sq <= std::numeric_limits<double>::max()
                   ? std::sqrt(sq)
                   : X.row(i).stableNorm();
  }
  U.resize(n, X.cols());
  Eigen::Index k = 0;
  constexpr double tiny = std::numeric_limits<double>::min();
  if ((norms.array() >= tiny).all()) {
    k = n;
    U = norms.cwiseInverse().asDiagonal() * X;
  } else {
    for (Eigen::Index i = 0; i < n; ++i) {
      if (norms(i) >= tiny) {
        U.row(k++) = X.row(i) / norms(i);
      } else if (norms(i) > 0.0) {
        // A subnormal row: 1/norm overflows. Scale it exactly by 2^600 into the normal range,
        // then normalise (the direction is that of the stored row).
        const Eigen::RowVectorXd y = X.row(i) * std::ldexp(1.0, 600);
        U.row(k++) = y / y.norm();
      }
    }
  }
  if (k < 2) return std::numeric_limits<double>::quiet_NaN();
  // The Gram matrix is symmetric: its strictly lower triangle (about k^2 d flops instead of
  // 2 k^2 d) counts every pair twice over. It is formed one block of rows at a time (each a
  // dense product, its block-diagonal corner rows only up to the diagonal), against at most
  // kColumns earlier rows at a time, so the work storage is kBlock x kColumns (4 MiB), not k x k:
  // large N needs no N x N matrix. (Up to k = kColumns + kBlock the sums are those of one chunk.)
  constexpr Eigen::Index kBlock = 64, kColumns = 8192;
  double sum_abs = 0.0;
  for (Eigen::Index i0 = 0; i0 < k; i0 += kBlock) {
    const Eigen::Index b = std::min(kBlock, k - i0);
    // Rows i0 .. i0+b-1 against rows 0 .. i0-1 (pairs j < i), a chunk of columns at a time.
    for (Eigen::Index j0 = 0; j0 < i0; j0 += kColumns) {
      const Eigen::Index c = std::min(kColumns, i0 - j0);
      G.noalias() = U.middleRows(i0, b) * U.middleRows(j0, c).transpose();
      sum_abs += G.cwiseAbs().sum();
    }
    // The block's corner: rows against themselves, below the diagonal.
    G.noalias() = U.middleRows(i0, b) * U.middleRows(i0, b).transpose();
    for (Eigen::Index r = 1; r < b; ++r) sum_abs += G.row(r).head(r).cwiseAbs().sum();
  }
  // Each |cos| is at most 1 (Cauchy-Schwarz); rounding of unit rows may exceed it by ulps.
  return std::min(1.0, 2.0 * sum_abs / static_cast<double>(k * (k - 1)));
}

TokenMeasures measure_tokens(const Eigen::Ref<const Matrix>& X, const MeasureOptions& opt, Vector& sigma) {
  TokenMeasures m;
  sigma = singular_values(X);
  m.fro_norm = frobenius(X);
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

std::array<double, 10> token_measure_values(const TokenMeasures& m) {
  return {m.mu,   m.mu_rel,           m.fro_norm,    m.sigma_min,    m.sigma_max,
          m.rank, m.rank_one_residual, m.stable_rank, m.cos_abs_mean, m.sigma_at_max_rank};
}

}  // namespace rcsim
