// Measures of the attention matrices themselves (peer measures, docs/science/peers.md): their rank and the
// ergodicity coefficient of their products, the quantity whose decay drives rank collapse in the
// products-of-stochastic-matrices view.
#pragma once

#include "kernel/support/types.hpp"

namespace rcsim {

// Dobrushin's ergodicity coefficient tau(P) = (1/2) max_{i,j} sum_k |P_ik - P_jk| (= 1 - min_{i,j}
// sum_k min(P_ik, P_jk) for a row-stochastic P): 0 iff all rows are equal. 0 for one row.
double ergodicity_coefficient(const Eigen::Ref<const Matrix>& P);

}  // namespace rcsim
