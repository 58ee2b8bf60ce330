// The row normalisations N after attention (SCIENCE.md section 1, step 6; none, sphere,
// projection, layernorm, rmsnorm with gain and bias) and the elementwise maps that replace them
// (dyt, derf): the forward normalize_rows, its adjoint and
// its tangent, in double and float.
#pragma once

#include <vector>

#include "kernel/model/model_spec.hpp"
#include "kernel/model/normalization_params.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {


// Normalise every row y of Y in place:
//   none:       y
//   sphere:     y / ||y||
//   layernorm:  g * (y - mean(y)) / sqrt(var(y) + eps) + b   (population variance)
//   projection: y - mean(y)
//   rmsnorm:    g * y / sqrt(mean(y^2) + eps)
//   dyt:        g * tanh(a y) + b   elementwise, a = alpha (Dynamic Tanh, Zhu et al. 2025)
//   derf:       g * erf(a y) + b    elementwise (Dynamic erf, Chen et al. 2025, with its shift s = 0)
// (dyt and derf have no degenerate rows.)
// A row whose direction is lost (the vector divided by, i.e. y for sphere/rmsnorm and y - mean(y)
// for layernorm/projection, has norm below DBL_MIN: zero or subnormal) is a degenerate row. Its
// output is defined and finite: sphere and rmsnorm leave it zero, layernorm sets it to b,
// projection leaves it zero. Returns the number of degenerate rows.
int normalize_rows(Eigen::Ref<Matrix> Y, const Normalization& norm);
// The same in float (run.precision = float32; gain, bias and eps rounded to float).
int normalize_rows(Eigen::Ref<MatrixF> Y, const Normalization& norm);

// ---- adjoint and tangent ----

// Adjoint: Y is the input of normalize_rows, dOut the gradient of its output. Returns dY; adds
// dL/dg and dL/db (1 x d) into dgain, dbias (layernorm, dyt, derf: both; rmsnorm: gain), sized here when
// empty. Degenerate rows (no direction: the forward's convention) pass no gradient.
template <class T>
MatrixT<T> norm_backward(const MatrixT<T>& Y, const MatrixT<T>& dOut, const Normalization& norm, RowVectorT<T>& dgain,
                         RowVectorT<T>& dbias);

// Tangent: dY a tangent of the input Y; returns d N(Y) (the gain and bias held fixed).
// Degenerate rows have tangent 0.
template <class T>
MatrixT<T> norm_jvp(const MatrixT<T>& Y, const MatrixT<T>& dY, const Normalization& norm);

// The rows y -> s y / |y| (QK-normalisation, kernel/block/layer.hpp): adjoint and tangent. A zero row
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
