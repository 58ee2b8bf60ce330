#include "kernel/engine_setup.hpp"

#include <algorithm>
#include <utility>

#include "kernel/derivative_measures.hpp"
#include "kernel/measure_registry.hpp"
#include "kernel/platform.hpp"

namespace rcsim {

EngineSetup prepare(const ModelSpec& c, const MaskMatrix* custom, InputArrays inputs) {
  EngineSetup s;
  s.config = c;
  s.mask = make_mask(c, custom);
  s.graph = analyse_mask(s.mask);
  s.files = std::move(inputs);
  s.max_rank = max_rank_after_layer(c);
  s.max_rank_input = std::min(c.model.tokens, c.model.dim);
  s.platform = resolved_platform(c);
  s.trial_threads = threads_per_trial(c);
  s.keep_attention = c.output.attention || wants_pass(c, MeasurePass::attention) ||
                     wants_pass(c, MeasurePass::attention_product);
  check_derivative_measures(c);
  return s;
}

}  // namespace rcsim
