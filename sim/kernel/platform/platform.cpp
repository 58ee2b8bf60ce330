#include "kernel/platform/platform.hpp"

#include <algorithm>
#include <thread>

#include "kernel/support/errors.hpp"
#include "kernel/measures/measure_registry.hpp"
#include "kernel/platform/platform_opencl.hpp"

namespace rcsim {

std::string cpu_platform_refusal(const ModelSpec& c) {
  // The attention settings that only the general path computes (AttentionSettings, model_spec.hpp).
  if (const char* setting = c.attention.general_path_setting()) return setting;
  if (c.mask.type == MaskType::custom) return "mask.type = custom";
  if (c.attention_bias) return "attention.bias = true";
  if (c.attention.shape.active()) return "attention.shape_a/b/c (shaped attention)";
  if (c.dropout.attention > 0.0) return "dropout.attention > 0";
  // The unit-speed step sums the field as differences on the N x N weights (kernel/block/layer.cpp).
  if (c.dynamics_speed == DynamicsSpeed::unit) return "dynamics.speed = unit";
  if (c.output.attention) return "output.attention = true";
  if (wants_pass(c, MeasurePass::attention) || wants_pass(c, MeasurePass::attention_product))
    return "output.measures (a measure of the attention matrix)";
  return "";
}

std::string opencl_platform_refusal(const ModelSpec& c) { return cpu_platform_refusal(c); }

Platform resolved_platform(const ModelSpec& c) {
  switch (c.run.platform) {
    case Platform::reference:
      return Platform::reference;
    case Platform::cpu:
      if (const std::string why = cpu_platform_refusal(c); !why.empty())
        throw UsageError("key 'run.platform' = cpu: the cpu platform does not cover " + why +
                         "; use run.platform = reference (or auto, which picks the platform that covers the run)");
      return Platform::cpu;
    case Platform::opencl:
      if (!opencl_platform_built())
        throw UsageError(
            "key 'run.platform' = opencl: this build has no opencl platform (CMake did not find OpenCL: Debian "
            "opencl-headers, opencl-clhpp-headers, ocl-icd-opencl-dev; rebuild after installing them); use "
            "run.platform = cpu, reference or auto");
      if (const std::string why = opencl_platform_refusal(c); !why.empty())
        throw UsageError("key 'run.platform' = opencl: the opencl platform does not cover " + why +
                         "; use run.platform = reference (or auto, which picks the platform that covers the run)");
      return Platform::opencl;
    case Platform::automatic:
      break;
  }
  return c.model.tokens >= kCpuPlatformFromTokens && cpu_platform_refusal(c).empty() ? Platform::cpu
                                                                                    : Platform::reference;
}

bool needs_dense_mask(const ModelSpec& c) {
  return c.mask.type == MaskType::custom || resolved_platform(c) == Platform::reference ||
         wants_pass(c, MeasurePass::gradients);
}

int threads_per_trial(const ModelSpec& c) {
  const int all =
      c.run.threads > 0 ? c.run.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int in_flight = std::max(1, std::min(all, c.run.trials));
  return std::max(1, all / in_flight);
}

}  // namespace rcsim
