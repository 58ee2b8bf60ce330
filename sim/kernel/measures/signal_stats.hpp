// Forward statistics of signal propagation (SCIENCE.md section 6; docs/science/gradients.md),
// for a token matrix X (N x d, rows are tokens).
#pragma once

#include "kernel/support/types.hpp"

namespace rcsim {

// Signed mean cosine: the mean over ordered pairs i != j of cos(x_i, x_j) over the nonzero
// tokens; NaN when fewer than two tokens are nonzero.
double cos_mean(const Eigen::Ref<const Matrix>& X);
// Gram statistic q = (1/N) sum_i <x_i, x_i> / d (mean diagonal of X X^T / d).
double gram_q(const Eigen::Ref<const Matrix>& X);
// Gram statistic p = (1/(N(N-1))) sum_{i != j} <x_i, x_j> / d (mean off-diagonal); NaN for N = 1.
double gram_p(const Eigen::Ref<const Matrix>& X);
// Massive activations: max |x_ij| / median |x_ij| over all N d entries (median of an even count:
// the mean of the two middle values); +inf when the median is 0 and the maximum is not, NaN for X = 0.
double massive_ratio(const Eigen::Ref<const Matrix>& X);
// Relative update size ||X_next - X||_F / ||X||_F (NaN for X = 0).
double update_size(const Eigen::Ref<const Matrix>& X, const Eigen::Ref<const Matrix>& X_next);

}  // namespace rcsim
