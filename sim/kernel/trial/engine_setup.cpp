#include "kernel/trial/engine_setup.hpp"

#include <algorithm>
#include <utility>

#include "kernel/trial/derivative_measures.hpp"
#include "kernel/measures/measure_registry.hpp"
#include "kernel/trial/platform_table.hpp"

namespace rcsim {

EngineSetup prepare(const ModelSpec& c, const MaskMatrix* custom, InputArrays inputs) {
  EngineSetup s;
  s.config = c;
  EngineMask mask = engine_mask(c, custom, needs_dense_mask(c));  // built-in masks: never N x N unless needed
  s.mask = std::move(mask.dense);
  s.rows = std::move(mask.rows);
  s.graph = std::move(mask.graph);
  s.files = std::move(inputs);
  s.per_layer = layer_settings(c);
  s.max_rank = max_rank_after_layer(c);
  s.max_rank_input = std::min(c.model.tokens, c.model.dim);
  s.platform = resolved_platform(c);
  s.trial_threads = threads_per_trial(c);
  s.keep_attention = c.output.attention || wants_pass(c, MeasurePass::attention) ||
                     wants_pass(c, MeasurePass::attention_product);
  s.attention_statistics = wants_pass(c, MeasurePass::attention_rows);
  check_derivative_measures(c);
  return s;
}

}  // namespace rcsim
