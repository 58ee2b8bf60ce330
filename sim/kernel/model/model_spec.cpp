#include "kernel/model/model_spec.hpp"

#include <algorithm>

namespace rcsim {

namespace {

// Whether a block with these settings ends with a centring normalisation without bias.
bool ends_centred(const ModelSpec& c, NormPosition position, NormType type, double alpha) {
  // The block's last step must be a centring normalisation: post, or peri without residual.
  const bool last_is_norm = position == NormPosition::post || position == NormPosition::ngpt ||
                            (position == NormPosition::peri && alpha == 0.0);
  return last_is_norm && !c.norm.params_from_file &&
         (type == NormType::projection || (type == NormType::layernorm && c.norm.bias.empty()));
}

}  // namespace

int max_rank_after_layer(const ModelSpec& c) {
  const int N = c.model.tokens, d = c.model.dim;
  // model.layer_overrides: every block must end centred; the base settings count when a block is
  // outside every range.
  int covered = 0;
  bool centred = true;
  for (const auto& o : c.layer_overrides) {
    covered += o.to - o.from + 1;
    centred = centred && ends_centred(*o.spec, o.spec->norm.position, o.spec->norm.type, o.spec->residual_alpha);
  }
  if (covered < c.model.layers) centred = centred && ends_centred(c, c.norm.position, c.norm.type, c.residual_alpha);
  return centred ? std::min(N, d - 1) : std::min(N, d);
}

}  // namespace rcsim
