// Two collapse measures of the literature (peer measures, docs/science/peers.md).
#pragma once

#include "kernel/support/types.hpp"

namespace rcsim {

// Dong et al. (2021)'s composite norm sqrt(||M||_1 ||M||_inf), ||M||_1 the largest column sum of
// |M_ij|, ||M||_inf the largest row sum.
double composite_norm(const Eigen::Ref<const Matrix>& M);
// Their residual in it: composite_norm(X - 1 x_bar), x_bar the mean token.
double dong_residual(const Eigen::Ref<const Matrix>& X);

// Effective rank (Roy and Vetterli 2007) from the singular values: exp(-sum_i p_i ln p_i),
// p_i = sigma_i / sum_j sigma_j (terms with p_i = 0 omitted). 0 for X = 0.
double effective_rank(const Vector& sigma);

}  // namespace rcsim
