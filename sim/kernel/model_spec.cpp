#include "kernel/model_spec.hpp"

#include <algorithm>

namespace rcsim {

const std::vector<std::string>& peer_measure_names() {
  static const std::vector<std::string> names = {"pair_density",   "clusters",  "dong_residual", "dong_residual_rel",
                                                 "effective_rank", "attn_rank", "ergodicity",
                                                 // signal propagation (docs/science/gradients.md)
                                                 "cos_mean", "gram_q", "gram_p", "massive_ratio", "update_size",
                                                 "grad_x_norm", "grad_wq_norm", "grad_wk_norm", "grad_wv_norm", "jacobian_log_fro2",
                                                 // --- Particles (docs/science/particles.md) ---
                                                 "energy", "clusters_90", "clusters_99", "clusters_999", "fourier_mode"};
  return names;
}

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
