// The rcsim command line: parses argv and dispatches to the library. Returns the exit status:
// 0 success, 1 runtime error, 2 usage error, 130 interrupted.
#pragma once

#include <string>
#include <vector>

namespace rcsim {

int cli_main(const std::vector<std::string>& args);

}  // namespace rcsim
