// Measures of a token matrix X (N x d), SCIENCE.md section 4.
#pragma once

#include <array>

#include "kernel/support/types.hpp"

namespace rcsim {

// True if every entry of X is finite, as X.allFinite() but vectorised: x * 0 is 0 for finite x
// and NaN for +-inf and NaN, so the sum of X * 0 is 0 exactly when every entry is finite (it
// cannot overflow, unlike the sum of X). Eigen's allFinite tests entry by entry (7 us for
// 128 x 64, a 1.5% of a layer step with measures).
bool all_finite(const Eigen::Ref<const Matrix>& X);

// Token similarity mu(X) = || X - 1 gamma ||_F, gamma = 1^T X / N the mean token (Wu et al.).
double token_similarity(const Eigen::Ref<const Matrix>& X);

// Singular values sigma_1 >= ... >= sigma_m, m = min(N, d), accurate to a few eps * sigma_max
// (never the eigenvalues of X^T X): Householder QR of the tall orientation when it has at least
// 5/3 as many rows as columns, Householder bidiagonalisation of the k x k triangle (or of X), and
// LAPACK's dqds (dlasq1) on the bidiagonal; Eigen's BDCSVD for non-finite input.
Vector singular_values(const Eigen::Ref<const Matrix>& X);

// Columns per panel of the blocked Householder QR inside singular_values for k = min(N, d):
// 16 for k > 32 (30-35% faster than Eigen's default 48 from 128 x 64 to 1024 x 128, measured
// in one process; docs/dev/performance.md), Eigen's 48 (one panel: unblocked) for k <= 32.
int qr_block_size(Eigen::Index k);

// Tolerance of the numerical rank: max(atol, rtol * sigma_max).
double rank_tolerance(const Vector& sigma, double rtol, double atol);
// #{ sigma_i > tol }.
int numerical_rank(const Vector& sigma, double rtol, double atol);

// sqrt(sigma_2^2 + ... + sigma_m^2) / ||X||_F: distance to the nearest rank-one matrix,
// relative. 0 for X = 0.
double rank_one_residual(const Vector& sigma);

// ||X||_F^2 / sigma_max^2 (0 for X = 0).
double stable_rank(const Vector& sigma);

// Mean of |cos(x_i, x_j)| over ordered pairs i != j of nonzero tokens; NaN (undefined) when
// fewer than two tokens are nonzero.
double cos_abs_mean(const Eigen::Ref<const Matrix>& X);

struct MeasureOptions {
  double rank_rtol = 0.0;
  double rank_atol = 0.0;
  int max_rank = 0;  // the largest rank the layer allows (1-based index of sigma_at_max_rank)
};

// All per-layer token measures at once (one SVD).
struct TokenMeasures {
  double mu = 0, mu_rel = 0, fro_norm = 0, sigma_min = 0, sigma_max = 0, rank = 0,
         rank_one_residual = 0, stable_rank = 0, cos_abs_mean = 0, sigma_at_max_rank = 0;
};
TokenMeasures measure_tokens(const Eigen::Ref<const Matrix>& X, const MeasureOptions& opt, Vector& sigma);
// The values of `m` in the order of token_measure_info() (kernel/trial/simulation.hpp): mu, mu_rel,
// fro_norm, sigma_min, sigma_max, rank, rank_one_residual, stable_rank, cos_abs_mean,
// sigma_at_max_rank.
std::array<double, 10> token_measure_values(const TokenMeasures& m);

}  // namespace rcsim
