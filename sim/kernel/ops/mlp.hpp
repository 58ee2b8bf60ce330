// The MLP M(X) = act(X W_in + b_in) W_out + b_out (kernel/mlp.hpp: mlp_forward): its adjoint and
// tangent at the activations the forward kept (MlpCacheT), in double and float.
#pragma once

#include "kernel/mlp.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/ops/grads.hpp"
#include "kernel/types.hpp"
#include "kernel/weights.hpp"

namespace rcsim {

// act'(z) for the MLP activations.
template <class T>
T activation_derivative(T z, MlpActivation a);

// Adjoint at the forward's cache c (of mlp_forward on X): dOut = dL/dM; returns dX and fills g.
//   dW_out = H^T dM, db_out = 1^T dM, dZ = (dM W_out^T) .* act'(Z), dW_in = X^T dZ, db_in = 1^T dZ.
template <class T>
MatrixT<T> mlp_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, MlpActivation act, const MlpCacheT<T>& c,
                        const MatrixT<T>& dOut, MlpGradsT<T>& g);
// The same from X alone: runs mlp_forward with a cache, then the adjoint above.
template <class T>
MatrixT<T> mlp_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, MlpActivation act, const MatrixT<T>& dOut,
                        MlpGradsT<T>& g);
// Tangent: dM = (act'(Z) .* (dX W_in)) W_out.
template <class T>
MatrixT<T> mlp_jvp(const LayerWeightsT<T>& w, MlpActivation act, const MlpCacheT<T>& c, const MatrixT<T>& dX);

// Double overload, so that expressions convert (the template deduces from matrices only).
inline Matrix mlp_backward(const Matrix& X, const LayerWeights& w, MlpActivation act, const Matrix& dOut, MlpGrads& g) {
  return mlp_backward<double>(X, w, act, dOut, g);
}

}  // namespace rcsim
