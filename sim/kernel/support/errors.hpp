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

// A computation stopped by its cancel flag (SIGINT, SIGTERM, Ctrl-C in Python): finished trials are
// kept by the caller, the trial in progress is abandoned.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};

}  // namespace rcsim
