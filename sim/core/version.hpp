#pragma once

namespace rcsim {
const char* version();  // e.g. "0.1.0"
const char* git_sha();  // short SHA of the source tree at build time, or "unknown"
}  // namespace rcsim
