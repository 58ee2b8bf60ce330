// The two sources of dotted keys, an INI file and the command line, both read by
// Boost.Program_options under one set of rules: a key at most once per source (refused naming
// both places), one value per key, no stray arguments. `rcsim run` (parse_config_sources in
// config.hpp) and every other command's options (parse_command_options) are read through here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/keys.hpp"

namespace rcsim {

// One `key = value` of a source, in the order given; `known` is false for a key not among the
// declarations passed to the reader (the caller decides: a sweep axis, or an unknown key).
struct KeyEntry {
  std::string key, value;
  bool known = true;
};

// The entries of an INI file: [section] key = value, dotted as section.key (a key before any
// section keeps its bare name); '#' comments and whole-line ';' comments; a UTF-8 byte-order
// mark skipped. A key given twice is refused naming both lines. Throws UsageError.
std::vector<KeyEntry> read_ini_entries(const std::string& file, const std::vector<KeyDecl>& keys);

// The command line's --key=value (or --key value) arguments; a flag key (KeyDecl::flag) may be
// given alone (--name means true). A key given twice is refused naming both values. An argument
// that is not an option goes to `positionals` when given, else is refused. Throws UsageError;
// its messages say where the arguments came from with `where` (the Python module passes
// "given to rcsim.simulate", say).
inline const std::string kOnCommandLine = "on the command line";
std::vector<KeyEntry> read_command_line_entries(const std::vector<std::string>& args, const std::vector<KeyDecl>& keys,
                                                std::vector<std::string>* positionals = nullptr,
                                                const std::string& where = kOnCommandLine);

// A command's options: the declarations' defaults, then the INI file (if any), then the command
// line (which wins). An unknown key is a usage error naming it and the command's keys; every
// message starts with "rcsim COMMAND: ". Values are checked where they are read (read_int, ...).
KeyValues parse_command_options(const std::string& command, const std::vector<KeyDecl>& keys,
                                const std::vector<std::string>& args, const std::optional<std::string>& config_file,
                                std::vector<std::string>* positionals = nullptr);

}  // namespace rcsim
