#include "model/mlp.hpp"

#include <cmath>

namespace rcsim {

double mlp_activation(double z, MlpActivation a) {
  switch (a) {
    case MlpActivation::relu: return z > 0.0 ? z : 0.0;
    case MlpActivation::gelu: return 0.5 * z * (1.0 + std::erf(z * 0.70710678118654752440));
    case MlpActivation::gelu_tanh:
      return 0.5 * z * (1.0 + std::tanh(0.79788456080286535588 * (z + 0.044715 * z * z * z)));
  }
  return z;
}

void mlp_forward(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, MlpActivation a, MlpWorkspace& ws,
                 Matrix& out) {
  ws.hidden.noalias() = X * w.mlp_in;
  if (w.mlp_in_bias.size()) ws.hidden.rowwise() += w.mlp_in_bias;
  ws.hidden = ws.hidden.unaryExpr([a](double z) { return mlp_activation(z, a); });
  out.noalias() = ws.hidden * w.mlp_out;
  if (w.mlp_out_bias.size()) out.rowwise() += w.mlp_out_bias;
}

}  // namespace rcsim
