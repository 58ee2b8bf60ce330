#include "kernel/mlp.hpp"

#include <cmath>

namespace rcsim {

namespace {

template <class T>
T activation(T z, MlpActivation a) {
  switch (a) {
    case MlpActivation::relu: return z > T(0) ? z : T(0);
    case MlpActivation::gelu: return T(0.5) * z * (T(1) + std::erf(z * T(0.70710678118654752440)));
    case MlpActivation::gelu_tanh:
      return T(0.5) * z * (T(1) + std::tanh(T(0.79788456080286535588) * (z + T(0.044715) * z * z * z)));
    case MlpActivation::tanh: return std::tanh(z);
  }
  return z;
}

template <class T>
void forward_impl(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, MlpActivation a,
                  MlpWorkspaceT<T>& ws, MatrixT<T>& out, MlpCacheT<T>* cache) {
  ws.hidden.noalias() = X * w.mlp_in;
  if (w.mlp_in_bias.size()) ws.hidden.rowwise() += w.mlp_in_bias;
  if (cache) cache->pre = ws.hidden;
  ws.hidden = ws.hidden.unaryExpr([a](T z) { return activation<T>(z, a); });
  if (cache) cache->hidden = ws.hidden;
  out.noalias() = ws.hidden * w.mlp_out;
  if (w.mlp_out_bias.size()) out.rowwise() += w.mlp_out_bias;
}

}  // namespace

double mlp_activation(double z, MlpActivation a) { return activation<double>(z, a); }
float mlp_activation(float z, MlpActivation a) { return activation<float>(z, a); }

void mlp_forward(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, MlpActivation a, MlpWorkspace& ws,
                 Matrix& out, MlpCacheT<double>* cache) {
  forward_impl<double>(X, w, a, ws, out, cache);
}
void mlp_forward(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, MlpActivation a,
                 MlpWorkspaceT<float>& ws, MatrixF& out, MlpCacheT<float>* cache) {
  forward_impl<float>(X, w, a, ws, out, cache);
}

}  // namespace rcsim
