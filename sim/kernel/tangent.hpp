// Tangent projection of the residual update (peer dynamics, docs/science/peers.md): the sphere codes step
//   x_i <- x_i + alpha P_i(v_i),  P_i(v) = v - (<v, x_i> / ||x_i||^2) x_i,
// the projection of v onto the tangent space of the sphere through x_i (= v - <v, x_i> x_i for
// unit tokens), and renormalise afterwards (norm.type = sphere).
#pragma once

#include "kernel/types.hpp"

namespace rcsim {

// V <- P(V) row by row, P the projection orthogonal to the matching row of X. A zero row of X
// leaves its row of V unchanged (no direction to remove).
void project_tangent(const Eigen::Ref<const Matrix>& X, Eigen::Ref<Matrix> V);
void project_tangent(const Eigen::Ref<const MatrixF>& X, Eigen::Ref<MatrixF> V);  // run.precision = float32

}  // namespace rcsim
