// Two collapse measures of the literature (peer measures, docs/peers.md).
#pragma once

#include "core/types.hpp"

namespace rcsim {

// Dong et al. (2021)'s residual in their composite norm: R = X - 1 x_bar (x_bar the mean token),
// sqrt(||R||_1 ||R||_inf), ||R||_1 the largest column sum of |R_ij|, ||R||_inf the largest row sum.
double dong_residual(const Eigen::Ref<const Matrix>& X);

// Effective rank (Roy and Vetterli 2007) from the singular values: exp(-sum_i p_i ln p_i),
// p_i = sigma_i / sum_j sigma_j (terms with p_i = 0 omitted). 0 for X = 0.
double effective_rank(const Vector& sigma);

}  // namespace rcsim
