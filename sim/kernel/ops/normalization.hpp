// The row normalisations N (kernel/normalization.hpp: none, sphere, projection, layernorm,
// rmsnorm with gain and bias): the adjoint and the tangent of normalize_rows, in double and float.
#pragma once

#include "kernel/normalization.hpp"
#include "kernel/types.hpp"

namespace rcsim {

// Adjoint: Y is the input of normalize_rows, dOut the gradient of its output. Returns dY; adds
// dL/dg and dL/db (1 x d) into dgain, dbias (layernorm: both; rmsnorm: gain), sized here when
// empty. Degenerate rows (no direction: the forward's convention) pass no gradient.
template <class T>
MatrixT<T> norm_backward(const MatrixT<T>& Y, const MatrixT<T>& dOut, const Normalization& norm, RowVectorT<T>& dgain,
                         RowVectorT<T>& dbias);

// Tangent: dY a tangent of the input Y; returns d N(Y) (the gain and bias held fixed).
// Degenerate rows have tangent 0.
template <class T>
MatrixT<T> norm_jvp(const MatrixT<T>& Y, const MatrixT<T>& dY, const Normalization& norm);

// The rows y -> s y / |y| (QK-normalisation, kernel/layer.hpp): adjoint and tangent. A zero row
// (left 0 by the forward) gets 0.
template <class T>
MatrixT<T> scaled_sphere_backward(const MatrixT<T>& Y, const MatrixT<T>& G, T s);
template <class T>
MatrixT<T> scaled_sphere_jvp(const MatrixT<T>& Y, const MatrixT<T>& dY, T s);

// Double (and float) overloads, so that expressions convert (the templates deduce from matrices only).
inline Matrix norm_backward(const Matrix& Y, const Matrix& dOut, const Normalization& norm, RowVector& dgain,
                            RowVector& dbias) {
  return norm_backward<double>(Y, dOut, norm, dgain, dbias);
}
inline MatrixF norm_backward(const MatrixF& Y, const MatrixF& dOut, const Normalization& norm, RowVectorT<float>& dgain,
                             RowVectorT<float>& dbias) {
  return norm_backward<float>(Y, dOut, norm, dgain, dbias);
}
inline Matrix norm_jvp(const Matrix& Y, const Matrix& dY, const Normalization& norm) {
  return norm_jvp<double>(Y, dY, norm);
}

}  // namespace rcsim
