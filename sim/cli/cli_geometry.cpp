#include "cli/cli_geometry.hpp"

#include <algorithm>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/geometry_command.hpp"
#include "cli/invocation.hpp"
#include "config/key_sources.hpp"
#include "kernel/errors.hpp"
#include "kernel/printable.hpp"
#include "kernel/simulation.hpp"

namespace rcsim {

namespace {

const std::vector<CommandSpec>& commands() {
  static const std::vector<CommandSpec> specs = {keys_command(), brody_map_command(), brody_example_command(),
                                                 ln_geometry_command()};
  return specs;
}

const CommandSpec& command_spec(const std::string& name) {
  for (const auto& c : commands())
    if (c.name == name) return c;
  throw UsageError("unknown command '" + name + "'");
}

}  // namespace

bool is_geometry_command(const std::string& command) {
  return std::any_of(commands().begin(), commands().end(), [&](const CommandSpec& c) { return c.name == command; });
}

int run_geometry_command(const std::string& command, const std::vector<std::string>& keys,
                         const std::optional<std::string>& config_file, const std::string& command_line, bool quiet,
                         bool force, const std::atomic<bool>* cancel) {
  const CommandSpec& spec = command_spec(command);
  auto v = parse_command_options(command, spec.keys, keys, config_file);
  // Before computing: never replace a foreign file (or anything not a regular file).
  if (!v["output.file"].empty()) h5::check_replaceable(v["output.file"], "output.file", "rcsim-" + command, force);
  if (command == "keys") return cmd_keys(std::move(v), command_line);
  if (command == "brody-map") {
    try {
      return cmd_brody_map(std::move(v), command_line, quiet, cancel);
    } catch (const Interrupted&) {
      std::cerr << "rcsim: brody-map interrupted; nothing written (rerun the command)\n";
      return 130;
    }
  }
  if (command == "brody-example") return cmd_brody_example(std::move(v), command_line);
  return cmd_ln_geometry(std::move(v), command_line);
}

std::string geometry_help_text() {
  std::ostringstream os;
  os << "\ngeometry commands (docs/user/geometry.md), each with its own keys:\n";
  for (const auto& c : commands()) {
    os << "  rcsim " << c.name << " [--key=value ...]\n      " << c.summary << "\n";
    os << keys_help_plain(c.keys);
  }
  return os.str();
}

std::string geometry_command_help(const std::string& name) {
  const CommandSpec& c = command_spec(name);
  std::ostringstream os;
  os << "usage: rcsim " << c.name << " [--config FILE] [--key=value ...] [--force] [--quiet]\n\n  " << c.summary
     << " (docs/user/geometry.md)\n\nkeys (default; meaning; also in an INI file given with --config):\n";
  os << keys_help_plain(c.keys);
  return os.str();
}

std::string geometry_command_summaries() {
  std::ostringstream os;
  for (const auto& c : commands()) os << hanging_text("  " + c.name, c.summary, 16, 1);
  return os.str();
}

}  // namespace rcsim
