// The tangent projection F = P_X(V) row by row, P_x v = v - ((v . x) / |x|^2) x
// (residual.project = tangent; kernel/tangent.hpp: project_tangent): adjoint and tangent in both
// arguments. A zero row of X: F = V (adjoint dV = G, dX = 0; tangent dV).
#pragma once

#include "kernel/types.hpp"

namespace rcsim {

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
