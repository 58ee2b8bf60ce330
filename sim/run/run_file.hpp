// The HDF5 run file: one file per run (layout in README.md, "HDF5 layout").
#pragma once

#include <string>
#include <vector>

#include "run/progress.hpp"
#include "run/simulation.hpp"

namespace rcsim {

constexpr int kRunFormatVersion = 2;  // 2: each group carries its own coordinates; every axis has one

struct Provenance {
  std::string command_line;
  int threads = 1;
};

// Write the whole run to `path` (the caller writes to a temporary name and renames).
void write_run_file(const std::string& path, const EngineSetup& s, const RunResults& r, const Provenance& p);

// True iff `path` is a complete run file (complete = 1) whose /config equals `config_ini`.
bool run_file_matches(const std::string& path, const std::string& config_ini);

// What is at an output path: nothing (or an unreadable/incomplete file, recomputed), a complete
// run file of this configuration, or a complete run file of another configuration.
enum class RunFileState { absent, matches, differs };
struct RunFileCheck {
  RunFileState state = RunFileState::absent;
  std::string difference;  // for `differs`: the first differing line, "KEY: FILE_VALUE -> NEW_VALUE"
};
RunFileCheck check_run_file(const std::string& path, const std::string& config_ini);

// The first line where two INI texts differ, as "key: a -> b" ("" if equal).
std::string first_difference(const std::string& ini_a, const std::string& ini_b);

// Run `c` and write its file atomically: to `output.file`.tmp, renamed to `output.file` when
// complete; the temporary file is removed on any error or interruption. Completed trials are
// checkpointed to `output.file`.partial (see checkpoint.hpp) so that a rerun after a crash or
// Ctrl-C resumes. Creates missing parent directories. Returns the path written.
// `progress` (may be null) is told about every completed trial.
std::string run_to_file(const Config& c, const Provenance& p, const std::atomic<bool>* cancel,
                        Progress* progress);
// The same with a log-line progress (show_progress) or none.
std::string run_to_file(const Config& c, const Provenance& p, const std::atomic<bool>* cancel,
                        bool show_progress);

// Run `c` in memory and return the bytes of the run file that run_to_file would write (the
// same writer, into an HDF5 file image; nothing touches the disk, output.file only names the
// image). For the Python bindings (rcsim.simulate, docs/python.md). Throws Interrupted when
// `cancel` is set.
std::vector<char> run_to_image(const Config& c, const Provenance& p, const std::atomic<bool>* cancel);

// The current UTC time as ISO 8601.
std::string utc_now();

}  // namespace rcsim
