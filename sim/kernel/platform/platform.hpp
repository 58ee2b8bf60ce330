// run.platform (docs/dev/platforms.md): which implementation runs the attention of a layer.
// The reference platform is layer.cpp's (the N x N attention matrix): the truth that every other
// platform is tested against. The cpu platform is fused_attention.hpp's (no N x N matrix, the rows
// of one trial on every thread), where it covers the configuration.
#pragma once

#include <string>

#include "kernel/model/model_spec.hpp"

namespace rcsim {

// run.platform = auto picks cpu from this many tokens on (below it the N x N matrix is small and
// the reference's whole-matrix products are as fast; the golden set's runs stay on the reference).
inline constexpr int kCpuPlatformFromTokens = 512;

// Why the cpu platform does not cover `c` ("" if it does): the first setting it lacks, as
// "KEY = VALUE". The cpu platform computes softmax attention on masks whose rows are one range.
std::string cpu_platform_refusal(const ModelSpec& c);

// Why the opencl platform (platform_opencl.hpp) does not cover `c` ("" if it does): it computes
// the cpu platform's operation on an OpenCL device, so it covers what the cpu platform covers.
std::string opencl_platform_refusal(const ModelSpec& c);

// The platform that runs `c`: cpu, opencl or reference (auto resolved as above; auto never picks
// opencl). run.platform = cpu or opencl on a configuration it does not cover is a UsageError
// naming the setting and the platform; opencl in a build without OpenCL is a UsageError too.
Platform resolved_platform(const ModelSpec& c);

// Whether a run of `c` needs the dense N x N mask (mask.hpp) besides its row ranges
// (mask_ranges.hpp): a custom mask, the reference platform (its general path reads the matrix) or
// the gradient measures (the reverse pass). The cpu and opencl platforms read the ranges alone.
bool needs_dense_mask(const ModelSpec& c);

// Threads for the inside of one trial: the worker threads (run.threads, 0 = all cores) left over
// when every trial in flight has one, at least 1.
int threads_per_trial(const ModelSpec& c);

}  // namespace rcsim
