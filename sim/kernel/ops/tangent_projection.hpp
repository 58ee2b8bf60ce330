// Tangent projection of the residual update (peer dynamics, docs/science/peers.md): the sphere codes step
//   x_i <- x_i + alpha P_i(v_i),  P_i(v) = v - (<v, x_i> / ||x_i||^2) x_i,
// the projection of v onto the tangent space of the sphere through x_i (= v - <v, x_i> x_i for
// unit tokens), and renormalise afterwards (norm.type = sphere).
// As an operation F = P_X(V): the forward project_tangent, and the adjoint and tangent in both
// arguments. A zero row of X: F = V (adjoint dV = G, dX = 0; tangent dV).
#pragma once

#include "kernel/support/types.hpp"

namespace rcsim {


// V <- P(V) row by row, P the projection orthogonal to the matching row of X. A zero row of X
// leaves its row of V unchanged (no direction to remove).
void project_tangent(const Eigen::Ref<const Matrix>& X, Eigen::Ref<Matrix> V);
void project_tangent(const Eigen::Ref<const MatrixF>& X, Eigen::Ref<MatrixF> V);  // run.precision = float32

// ---- adjoint and tangent ----

// G = dL/dF: returns dL/dV = P_x(G) and sets dX = -c G - e V + 2 c e X row by row,
// c = (v . x) / |x|^2, e = (G . x) / |x|^2.
template <class T>
MatrixT<T> tangent_backward(const MatrixT<T>& X, const MatrixT<T>& V, const MatrixT<T>& G, MatrixT<T>& dX);
// dF = dV - c' x - c dX, c' = (dv . x + v . dx - 2 c (x . dx)) / |x|^2.
template <class T>
MatrixT<T> tangent_jvp(const MatrixT<T>& X, const MatrixT<T>& V, const MatrixT<T>& dX, const MatrixT<T>& dV);

// Double overload, so that expressions convert (the template deduces from matrices only).
inline Matrix tangent_backward(const Matrix& X, const Matrix& V, const Matrix& G, Matrix& dX) {
  return tangent_backward<double>(X, V, G, dX);
}

}  // namespace rcsim
