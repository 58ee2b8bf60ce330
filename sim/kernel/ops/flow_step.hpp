// The particle flow (docs/science/particles.md): the field F(Z) = A(Z), or P_Z(A(Z)) with
// residual.project = tangent (A the attention branch, kernel/ops/attention_head.hpp; P the tangent
// projection, kernel/ops/tangent_projection.hpp), and one classical RK4 step of size dt
// (dynamics.integrator = rk4, kernel/block/layer.cpp: rk4_impl)
//   k1 = F(X), k2 = F(X + dt/2 k1), k3 = F(X + dt/2 k2), k4 = F(X + dt k3),
//   out = N(X + dt/6 (k1 + 2 k2 + 2 k3 + k4)),
// with adjoints and tangents composed from the field's, at the forward's cache (LayerCacheT: the
// stages, stage points and sum). The Euler step is the post sub-block (kernel/ops/sub_block.hpp).
#pragma once

#include "kernel/model/block_settings.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/ops/attention.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/model/grads.hpp"

namespace rcsim {

// The field's adjoint and tangent at the point Z; A the branch output A(Z) before the projection,
// c the cache of the branch's evaluation at Z, `inner` the branch's parameters.
template <class T>
MatrixT<T> field_backward(const MatrixT<T>& Z, const MatrixT<T>& A, const LayerWeightsT<T>& w, const LayerParams& inner,
                          bool tangent, const LayerCacheT<T>& c, const MatrixT<T>& dF, BlockGradsT<T>& g);
template <class T>
MatrixT<T> field_jvp(const MatrixT<T>& Z, const MatrixT<T>& A, const LayerWeightsT<T>& w, const LayerParams& inner,
                     bool tangent, const LayerCacheT<T>& c, const MatrixT<T>& dZ);

// The RK4 step's adjoint (dS = N^T(dOut); dk1 = dk4 = dt/6 dS, dk2 = dk3 = dt/3 dS, dX = dS; then
// from the last stage dZ_i = F^T(Z_i, dk_i), dX += dZ_i, dk_{i-1} += c_i dZ_i with c = dt/2, dt/2,
// dt; the weights' gradients summed over the stages; N's gradients in slot kNormAttn) and tangent.
template <class T>
MatrixT<T> rk4_backward(const LayerWeightsT<T>& w, const LayerParams& inner, bool tangent, const Normalization& n,
                        T dt, const LayerCacheT<T>& c, const MatrixT<T>& dOut, BlockGradsT<T>& g);
template <class T>
MatrixT<T> rk4_jvp(const LayerWeightsT<T>& w, const LayerParams& inner, bool tangent, const Normalization& n, T dt,
                   const LayerCacheT<T>& c, const MatrixT<T>& dX);

}  // namespace rcsim
