// run.platform (docs/dev/platforms.md): which implementation runs the attention of a layer, as a
// table of platforms (the policy; the kernels themselves are in kernel/platform/).
// The reference platform is layer.cpp's (the N x N attention matrix): the truth that every other
// platform is tested against. The cpu platform is fused_attention.hpp's (no N x N matrix, the rows
// of one trial on every thread), where it covers the configuration.
#pragma once

#include <string>
#include <vector>

#include "kernel/block/attention_kernel.hpp"
#include "kernel/model/model_spec.hpp"

namespace rcsim {

// run.platform = auto picks cpu from this many tokens on (below it the N x N matrix is small and
// the reference's whole-matrix products are as fast; the golden set's runs stay on the reference).
inline constexpr int kCpuPlatformFromTokens = 512;

// The platforms, one entry each (docs/dev/platforms.md): its key value, whether this build has it,
// whether this machine can run it, and why it does not cover a configuration ("" when it does: the
// first setting it lacks, as "KEY = VALUE"). The reference covers everything; resolved_platform
// reads nothing but this table, and one conformance test body holds every entry against the
// reference (tests/test_platform_conformance.cpp): a new platform is a new row and nothing else.
struct PlatformEntry {
  Platform platform;
  const char* name;                               // run.platform's value
  const char* absent;                             // why a build may lack it ("" if it never does)
  bool (*built)();                                // whether this build has it
  std::string (*unavailable)();                   // why this machine cannot run it ("" if it can: a device)
  std::string (*refusal)(const ModelSpec& c);     // "" if it covers c
  const AttentionKernel* (*kernel)();             // its attention kernel (the reference: none, nullptr)
  bool covers(const ModelSpec& c) const { return refusal(c).empty(); }
};
const std::vector<PlatformEntry>& platform_table();
const PlatformEntry& platform_entry(Platform p);  // p != automatic

// Why the cpu platform does not cover `c` ("" if it does). The cpu platform computes softmax
// attention on masks whose rows are one range, with the attention statistics.
std::string cpu_platform_refusal(const ModelSpec& c);

// Why the opencl platform (platform_opencl.hpp) does not cover `c` ("" if it does): it computes
// the cpu platform's operation on an OpenCL device, without the attention statistics yet.
std::string opencl_platform_refusal(const ModelSpec& c);

// The platform that runs `c`: cpu, opencl or reference (auto: the cpu platform from
// kCpuPlatformFromTokens tokens where it covers `c`, else the reference; auto never picks opencl).
// A platform named on a configuration it does not cover is a UsageError naming the setting and
// the platform; one this build lacks too.
Platform resolved_platform(const ModelSpec& c);

// Whether a run of `c` needs the dense N x N mask (mask.hpp) besides its row ranges
// (mask_ranges.hpp): a custom mask, the reference platform (its general path reads the matrix) or
// the gradient measures (the reverse pass). The cpu and opencl platforms read the ranges alone.
bool needs_dense_mask(const ModelSpec& c);

// Threads for the inside of one trial: the worker threads (run.threads, 0 = all cores) left over
// when every trial in flight has one, at least 1.
int threads_per_trial(const ModelSpec& c);

}  // namespace rcsim
