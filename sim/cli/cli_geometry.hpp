// The geometry commands of the command line (selectable keys, Brody's heat map and example,
// the LayerNorm ellipsoid). Each has its own small set of dotted keys, given as --key=value or in an INI file.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

namespace rcsim {

// True for keys, brody-map, brody-example, ln-geometry.
bool is_geometry_command(const std::string& command);

// Run one of them. `keys` are the --key=value arguments, `config_file` an optional INI file of
// the same keys (the command line wins); `command_line` is recorded in output
// files. Throws UsageError (exit 2) for unknown keys and bad values, and for an existing
// output.file that is not a complete file of the command's type (unless `force`).
int run_geometry_command(const std::string& command, const std::vector<std::string>& keys,
                         const std::optional<std::string>& config_file, const std::string& command_line, bool quiet,
                         bool force, const std::atomic<bool>* cancel);

// The keys of every geometry command, for rcsim --help-keys.
std::string geometry_help_text();
// `rcsim NAME --help`: the usage and keys of one geometry command.
std::string geometry_command_help(const std::string& name);
// One line per geometry command (name and summary), for `rcsim --help`.
std::string geometry_command_summaries();

}  // namespace rcsim
