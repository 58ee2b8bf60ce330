// Error types of rcsim. A UsageError is the user's to fix (bad key, value, file or shape) and
// makes the CLI exit with status 2; a RuntimeError is a failure while running (exit status 1).
#pragma once

#include <stdexcept>
#include <string>

namespace rcsim {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace rcsim
