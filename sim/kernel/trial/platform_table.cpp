#include "kernel/trial/platform_table.hpp"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "kernel/support/errors.hpp"
#include "kernel/measures/measure_registry.hpp"
#include "kernel/platform/fused_attention.hpp"
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

std::string opencl_platform_refusal(const ModelSpec& c) {
  if (wants_pass(c, MeasurePass::attention_rows))
    return "output.measures (the attention statistics: attn_max_weight, attn_sink, sink_rate, attn_received)";
  return cpu_platform_refusal(c);
}

namespace {
bool always() { return true; }
std::string available() { return ""; }
std::string opencl_unavailable() {
  return opencl_devices().empty() ? "no OpenCL device (install pocl-opencl-icd for the CPU; clinfo -l lists the devices)"
                                  : "";
}
std::string covers_all(const ModelSpec&) { return ""; }
const AttentionKernel* no_kernel() { return nullptr; }
const AttentionKernel* cpu_kernel() { return &cpu_attention_kernel(); }
const AttentionKernel* opencl_kernel() { return &opencl_attention_kernel(); }
}  // namespace

const std::vector<PlatformEntry>& platform_table() {
  static const std::vector<PlatformEntry> table = {
      {Platform::reference, "reference", "", always, available, covers_all, no_kernel},
      {Platform::cpu, "cpu", "", always, available, cpu_platform_refusal, cpu_kernel},
      {Platform::opencl, "opencl",
       "CMake did not find OpenCL: Debian opencl-headers, opencl-clhpp-headers, ocl-icd-opencl-dev; rebuild after "
       "installing them",
       opencl_platform_built, opencl_unavailable, opencl_platform_refusal, opencl_kernel},
  };
  return table;
}

const PlatformEntry& platform_entry(Platform p) {
  for (const PlatformEntry& e : platform_table())
    if (e.platform == p) return e;
  throw std::logic_error("platform_entry: run.platform = auto has no entry");
}

Platform resolved_platform(const ModelSpec& c) {
  if (c.run.platform == Platform::automatic)
    return c.model.tokens >= kCpuPlatformFromTokens && platform_entry(Platform::cpu).covers(c) ? Platform::cpu
                                                                                             : Platform::reference;
  const PlatformEntry& e = platform_entry(c.run.platform);
  const std::string key = std::string("key 'run.platform' = ") + e.name + ": ";
  if (!e.built())
    throw UsageError(key + "this build has no " + e.name + " platform (" + e.absent +
                     "); use run.platform = cpu, reference or auto");
  if (const std::string why = e.refusal(c); !why.empty())
    throw UsageError(key + "the " + e.name + " platform does not cover " + why +
                     "; use run.platform = reference (or auto, which picks the platform that covers the run)");
  return e.platform;
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
