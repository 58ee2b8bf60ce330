// rcsim's logger: messages on stderr as "rcsim: LEVEL: text", shared by the command line and the
// Python module (installed once per process).
#pragma once

#include <cstddef>

namespace rcsim {

void install_logger();

// Longest error line printed (each quoted value in it is cut at kEchoLimit already).
constexpr std::size_t kMessageLimit = 2000;

}  // namespace rcsim
