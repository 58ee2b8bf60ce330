// Unnormalised self-attention "USA" (peer dynamics, docs/science/peers.md; Geshkovski et al.):
//   A_ij = exp(S_ij) / N on the entries the mask allows, 0 elsewhere,
// S the logits beta <x_i W_Q, x_j W_K>; rows are not normalised (no softmax denominator).
#pragma once

#include "kernel/types.hpp"

namespace rcsim {

// Replace the logits S (N x N) by the USA weights in place. Logits above ln(DBL_MAX) overflow to
// +inf (the run then reports non-finite tokens).
void usa_weights(Eigen::Ref<Matrix> S, const MaskMatrix& mask);
void usa_weights(Eigen::Ref<MatrixF> S, const MaskMatrix& mask);  // run.precision = float32

}  // namespace rcsim
