// The HDF5 run file: one file per run (layout in README.md, "HDF5 layout").
#pragma once

#include <string>
#include <vector>

#include "kernel/simulation.hpp"

namespace rcsim {

constexpr int kRunFormatVersion = 2;  // 2: each group carries its own coordinates; every axis has one

struct Provenance {
  std::string command_line;
  int threads = 1;
};

// Write the whole run to `path` (the caller writes to a temporary name and renames); `config_ini`
// is the resolved configuration stored as /config (Config::to_ini()).
void write_run_file(const std::string& path, const std::string& config_ini, const EngineSetup& s, const RunResults& r,
                    const Provenance& p);
// The same file as the bytes of an HDF5 file image (nothing touches the disk; `name` labels messages).
std::vector<char> run_file_image(const std::string& name, const std::string& config_ini, const EngineSetup& s,
                                 const RunResults& r, const Provenance& p);

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


}  // namespace rcsim
