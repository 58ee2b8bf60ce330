#include "kernel/ops/flow_step.hpp"

#include "kernel/ops/attention_head.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/ops/tangent_projection.hpp"

namespace rcsim {

template <class T>
MatrixT<T> field_backward(const MatrixT<T>& Z, const MatrixT<T>& A, const LayerWeightsT<T>& w, const LayerParams& inner,
                          bool tangent, const LayerCacheT<T>& c, const MatrixT<T>& dF, BlockGradsT<T>& g) {
  if (!tangent) return attention_branch_backward<T>(Z, w, inner, c, dF, g);
  MatrixT<T> dZp;  // F = P_Z(A(Z)): the projection's adjoint in its vector and in its point
  const MatrixT<T> dA = tangent_backward<T>(Z, A, dF, dZp);
  return MatrixT<T>(attention_branch_backward<T>(Z, w, inner, c, dA, g) + dZp);
}

template <class T>
MatrixT<T> field_jvp(const MatrixT<T>& Z, const MatrixT<T>& A, const LayerWeightsT<T>& w, const LayerParams& inner,
                     bool tangent, const LayerCacheT<T>& c, const MatrixT<T>& dZ) {
  const MatrixT<T> dA = attention_branch_jvp<T>(Z, w, inner, c, dZ);
  return tangent ? tangent_jvp<T>(Z, A, dZ, dA) : dA;
}

template <class T>
MatrixT<T> rk4_backward(const LayerWeightsT<T>& w, const LayerParams& inner, bool tangent, const Normalization& n,
                        T dt, const LayerCacheT<T>& c, const MatrixT<T>& dOut, BlockGradsT<T>& g) {
  const MatrixT<T> dS = norm_backward<T>(c.Z, dOut, n, g.dgain[kNormAttn], g.dbias[kNormAttn]);
  MatrixT<T> dk[4] = {(dt / T(6)) * dS, (dt / T(3)) * dS, (dt / T(3)) * dS, (dt / T(6)) * dS};
  MatrixT<T> dX = dS;
  const T step[4] = {T(0), dt / T(2), dt / T(2), dt};  // Z_i = X + step_i k_{i-1}
  for (int i = 3; i >= 0; --i) {
    const auto s = static_cast<std::size_t>(i);
    const LayerCacheT<T>& stage = c.stages[s];  // its Z: the branch output A(Z_i) before the projection
    const MatrixT<T> dZ = field_backward<T>(c.points[s], stage.Z, w, inner, tangent, stage, dk[i], g);
    dX += dZ;
    if (i > 0) dk[i - 1] += step[i] * dZ;
  }
  return dX;
}

template <class T>
MatrixT<T> rk4_jvp(const LayerWeightsT<T>& w, const LayerParams& inner, bool tangent, const Normalization& n, T dt,
                   const LayerCacheT<T>& c, const MatrixT<T>& dX) {
  const T step[4] = {T(0), dt / T(2), dt / T(2), dt};
  MatrixT<T> dk[4];
  for (std::size_t i = 0; i < 4; ++i) {
    const MatrixT<T> dZ = i == 0 ? dX : MatrixT<T>(dX + step[i] * dk[i - 1]);
    dk[i] = field_jvp<T>(c.points[i], c.stages[i].Z, w, inner, tangent, c.stages[i], dZ);
  }
  const MatrixT<T> dS = dX + (dt / T(6)) * (dk[0] + T(2) * dk[1] + T(2) * dk[2] + dk[3]);
  return norm_jvp<T>(c.Z, dS, n);
}

#define RCSIM_FLOW_OPS(T)                                                                                           \
  template MatrixT<T> field_backward<T>(const MatrixT<T>&, const MatrixT<T>&, const LayerWeightsT<T>&,              \
                                        const LayerParams&, bool, const LayerCacheT<T>&, const MatrixT<T>&,          \
                                        BlockGradsT<T>&);                                                            \
  template MatrixT<T> field_jvp<T>(const MatrixT<T>&, const MatrixT<T>&, const LayerWeightsT<T>&, const LayerParams&, \
                                   bool, const LayerCacheT<T>&, const MatrixT<T>&);                                  \
  template MatrixT<T> rk4_backward<T>(const LayerWeightsT<T>&, const LayerParams&, bool, const Normalization&, T,    \
                                      const LayerCacheT<T>&, const MatrixT<T>&, BlockGradsT<T>&);                    \
  template MatrixT<T> rk4_jvp<T>(const LayerWeightsT<T>&, const LayerParams&, bool, const Normalization&, T,         \
                                 const LayerCacheT<T>&, const MatrixT<T>&);
RCSIM_FLOW_OPS(double)
RCSIM_FLOW_OPS(float)
#undef RCSIM_FLOW_OPS

}  // namespace rcsim
