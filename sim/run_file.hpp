// The HDF5 run file: one file per run (layout in README.md, "HDF5 layout").
#pragma once

#include <string>

#include "simulation.hpp"

namespace rcsim {

constexpr int kRunFormatVersion = 1;

struct Provenance {
  std::string command_line;
  int threads = 1;
};

// Write the whole run to `path` (the caller writes to a temporary name and renames).
void write_run_file(const std::string& path, const EngineSetup& s, const RunResults& r, const Provenance& p);

// True iff `path` is a complete run file (complete = 1) whose /config equals `config_ini`.
bool run_file_matches(const std::string& path, const std::string& config_ini);

// Run `c` and write its file atomically: to `output.file`.tmp, renamed to `output.file` when
// complete; the temporary file is removed on any error or interruption. Completed trials are
// checkpointed to `output.file`.partial (see checkpoint.hpp) so that a rerun after a crash or
// Ctrl-C resumes. Creates missing parent directories. Returns the path written.
std::string run_to_file(const Config& c, const Provenance& p, const std::atomic<bool>* cancel,
                        bool show_progress);

// The current UTC time as ISO 8601.
std::string utc_now();

}  // namespace rcsim
