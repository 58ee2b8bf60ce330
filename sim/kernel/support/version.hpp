// The build's identity, recorded in every output file's provenance.
#pragma once

#include <string>

namespace rcsim {
const char* version();      // e.g. "0.1.0"
const char* git_sha();      // short SHA of the source tree at build time, or "unknown"
const char* source_tree();  // "clean", "modified" (uncommitted changes when CMake ran) or "unknown"
const char* build_type();   // CMAKE_BUILD_TYPE: Release, Debug, ...
std::string compiler();     // e.g. "GCC 12.2.0"
// The vector instruction sets the build was compiled for, e.g. "x86-64+sse2" (portable) or
// "x86-64+sse2+avx+avx2+fma+avx512f" (-march=native on such a machine).
std::string instruction_set();
// UsageError-free start-up check: "" if this CPU runs every instruction set the build uses,
// else a message naming the missing ones (a -march=native binary copied to an older machine).
std::string missing_instruction_sets();
}  // namespace rcsim
