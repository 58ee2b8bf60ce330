// rcsim's logger: messages on stderr as "rcsim: LEVEL: text", shared by the command line and the
// Python module (installed once per process).
#pragma once

namespace rcsim {

void install_logger();

}  // namespace rcsim
