#include "core/version.hpp"

#ifndef RCSIM_VERSION
#define RCSIM_VERSION "0.0.0"
#endif
#ifndef RCSIM_GIT_SHA
#define RCSIM_GIT_SHA "unknown"
#endif

namespace rcsim {
const char* version() { return RCSIM_VERSION; }
const char* git_sha() { return RCSIM_GIT_SHA; }
}  // namespace rcsim
