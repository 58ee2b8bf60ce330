#include "kernel/support/version.hpp"

#include <utility>
#include <vector>

#include "version_info.hpp"  // generated: RCSIM_VERSION, RCSIM_GIT_SHA, RCSIM_SOURCE_TREE, RCSIM_BUILD_TYPE

namespace rcsim {
const char* version() { return RCSIM_VERSION; }
const char* git_sha() { return RCSIM_GIT_SHA; }
const char* source_tree() { return RCSIM_SOURCE_TREE; }
const char* build_type() { return RCSIM_BUILD_TYPE[0] ? RCSIM_BUILD_TYPE : "none"; }

std::string compiler() {
#if defined(__clang__)
  return std::string("Clang ") + __clang_version__;
#elif defined(__GNUC__)
  return "GCC " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
         std::to_string(__GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

namespace {

// The instruction sets this translation unit was compiled for (the whole build shares them:
// rcsim_arch), with the names __builtin_cpu_supports knows.
std::vector<const char*> compiled_sets() {
  std::vector<const char*> sets;
#if defined(__SSE2__)
  sets.push_back("sse2");
#endif
#if defined(__SSE4_2__)
  sets.push_back("sse4.2");
#endif
#if defined(__AVX__)
  sets.push_back("avx");
#endif
#if defined(__AVX2__)
  sets.push_back("avx2");
#endif
#if defined(__FMA__)
  sets.push_back("fma");
#endif
#if defined(__AVX512F__)
  sets.push_back("avx512f");
#endif
#if defined(__AVX512VL__)
  sets.push_back("avx512vl");
#endif
#if defined(__AVX512DQ__)
  sets.push_back("avx512dq");
#endif
#if defined(__AVX512BW__)
  sets.push_back("avx512bw");
#endif
  return sets;
}

}  // namespace

std::string instruction_set() {
#if defined(__x86_64__)
  std::string s = "x86-64";
#elif defined(__aarch64__)
  std::string s = "aarch64";
#elif defined(__wasm__)
  std::string s = "wasm";
#else
  std::string s = "unknown";
#endif
  for (const char* set : compiled_sets()) s += std::string("+") + set;
  return s;
}

std::string missing_instruction_sets() {
  std::string missing;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const std::vector<std::pair<const char*, bool>> have = {
      {"sse2", __builtin_cpu_supports("sse2")},         {"sse4.2", __builtin_cpu_supports("sse4.2")},
      {"avx", __builtin_cpu_supports("avx")},           {"avx2", __builtin_cpu_supports("avx2")},
      {"fma", __builtin_cpu_supports("fma")},           {"avx512f", __builtin_cpu_supports("avx512f")},
      {"avx512vl", __builtin_cpu_supports("avx512vl")}, {"avx512dq", __builtin_cpu_supports("avx512dq")},
      {"avx512bw", __builtin_cpu_supports("avx512bw")}};
  for (const char* set : compiled_sets())
    for (const auto& [name, ok] : have)
      if (std::string(name) == set && !ok) missing += (missing.empty() ? "" : ", ") + std::string(set);
#endif
  return missing;
}

}  // namespace rcsim
