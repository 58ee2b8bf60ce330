#include "kernel/model_spec.hpp"

#include <algorithm>

namespace rcsim {

int max_rank_after_layer(const ModelSpec& c) {
  const int N = c.model.tokens, d = c.model.dim;
  // The block's last step must be a centring normalisation: post, or peri without residual.
  const bool last_is_norm =
      c.norm.position == NormPosition::post || c.norm.position == NormPosition::ngpt ||
      (c.norm.position == NormPosition::peri && c.residual_alpha == 0.0);
  const bool centred_no_bias =
      last_is_norm && !c.norm.params_from_file &&
      (c.norm.type == NormType::projection || (c.norm.type == NormType::layernorm && c.norm.bias.empty()));
  return centred_no_bias ? std::min(N, d - 1) : std::min(N, d);
}

}  // namespace rcsim
