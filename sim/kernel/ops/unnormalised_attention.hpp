// Unnormalised self-attention "USA" (peer dynamics, docs/science/peers.md; Geshkovski et al.):
//   A_ij = exp(S_ij - c) / N on the entries the mask allows, 0 elsewhere,
// S the logits beta <x_i W_Q, x_j W_K>; rows are not normalised (no softmax denominator). The shift
// c is 0 (attention.kind = usa) or beta (attention.usa_normalised = true: the weights times e^-beta,
// exp(beta(<x_i, x_j> - 1)) / N for unit tokens with W_Q = W_K = I, which stays finite for every beta;
// the flow is the same up to a constant factor e^-beta of time, docs/science/particles.md section 6).
// The adjoint is the same for every c: dS = A .* dA (kernel/block/backward.cpp: usa_backward).
#pragma once

#include "kernel/support/types.hpp"

namespace rcsim {

// Replace the logits S (N x N) by the USA weights in place, shifted by `shift` (c above). Logits with
// S - c above ln(DBL_MAX) overflow to +inf (the run then reports non-finite tokens). shift = 0 is the
// unshifted USA bit for bit.
void usa_weights(Eigen::Ref<Matrix> S, const MaskMatrix& mask, double shift = 0.0);
void usa_weights(Eigen::Ref<MatrixF> S, const MaskMatrix& mask, double shift = 0.0);  // run.precision = float32

}  // namespace rcsim
