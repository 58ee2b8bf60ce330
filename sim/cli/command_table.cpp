#include "cli/command_table.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <sstream>

#include "app/geometry_command.hpp"
#include "cli/commands.hpp"
#include "config/key_sources.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {

// The configuration keys of the run vocabulary that `command` uses (KeyDecl::commands).
std::vector<KeyDecl> run_keys_of(const std::string& command) {
  std::vector<KeyDecl> keys;
  for (const KeyDecl& k : config_keys())
    if (k.used_by(command)) keys.push_back(k);
  return keys;
}

std::vector<KeyDecl> equilibria_keys() {
  std::vector<KeyDecl> keys = run_keys_of("equilibria");
  for (KeyDecl& o : equilibria_options()) keys.push_back(std::move(o));
  return keys;
}

Command entry(std::string name, std::string summary, std::function<std::string()> help,
              std::function<std::vector<KeyDecl>()> keys) {
  Command c;
  c.name = std::move(name);
  c.summary = std::move(summary);
  c.help = std::move(help);
  c.keys = std::move(keys);
  return c;
}

std::string geometry_command_help(const CommandSpec& c) {
  std::ostringstream os;
  os << "usage: rcsim " << c.name << " [--config FILE] [--key=value ...] [--force] [--quiet]\n\n  " << c.summary
     << " (docs/user/geometry.md)\n\nkeys (default; meaning; also in an INI file given with --config):\n";
  os << keys_help_plain(c.keys);
  return os.str();
}

Command geometry_entry(const CommandSpec& spec) {
  Command c = entry(spec.name, spec.summary, [spec] { return geometry_command_help(spec); },
                    [spec] { return spec.keys; });
  c.run = [name = spec.name](const Invocation& inv, const std::vector<std::string>& args) {
    // brody-map polls the cancel flag between draws; the other geometry commands do not, so they
    // keep the default action: SIGINT and SIGTERM end them at once (their output is written to an
    // exclusive temporary and renamed when complete; a rerun removes a stale temporary).
    if (name == "brody-map") {
      std::signal(SIGINT, on_signal);
      std::signal(SIGTERM, on_signal);
    }
    return run_geometry_command(name, inv.keys, inv.config_file, command_line_text(args), inv.quiet, inv.force,
                                &g_cancel);
  };
  return c;
}

std::vector<Command> declare_commands() {
  std::vector<Command> table;
  for (const char* name : {"run", "sweep"}) {
    Command c = entry(name,
                      name == std::string("run")
                          ? "simulate trials of an L-layer attention stack; every layer's measures to HDF5"
                          : "the same as run (a configuration with a [sweep] section runs every point)",
                      run_help, run_keys);
    c.shares_run_files = true;
    c.run = cmd_run;
    table.push_back(std::move(c));
  }
  Command mask = entry("mask-info", "print the mask, its centre nodes, radius and connectivity", mask_info_help,
                       [] { return run_keys_of("mask-info"); });
  mask.shares_run_files = true;
  mask.run = [](const Invocation& inv, const std::vector<std::string>&) { return cmd_mask_info(inv); };
  table.push_back(std::move(mask));
  Command eq = entry("equilibria", "iterate fixed weights to equilibria; classify them and their basins",
                     equilibria_help, equilibria_keys);
  eq.shares_run_files = true;
  eq.aliases = {{"-v", "--verbose"}};
  eq.run = cmd_equilibria;
  table.push_back(std::move(eq));
  Command analyze = entry("analyze",
                          "decay rates (exponential phase found automatically), collapse depth and the theory bound "
                          "of run files or sweep directories; a table per sweep",
                          analyze_help, analyze_options);
  analyze.run = [](const Invocation& inv, const std::vector<std::string>&) { return cmd_analyze(inv); };
  table.push_back(std::move(analyze));
  Command generate = entry("generate",
                           "token ids from a pretrained llama2.c checkpoint (greedy or sampled); with --measure "
                           "its stack's per-layer measures to HDF5",
                           generate_help, generate_options);
  generate.run = cmd_generate;
  table.push_back(std::move(generate));
  for (const CommandSpec& spec : geometry_commands()) table.push_back(geometry_entry(spec));
  return table;
}

// Every key and option of every command, each name once.
const std::vector<KeyDecl>& all_keys() {
  static const std::vector<KeyDecl> keys = [] {
    std::vector<KeyDecl> out;
    for (const Command& c : commands())
      for (KeyDecl& k : c.keys())
        if (std::none_of(out.begin(), out.end(), [&](const KeyDecl& o) { return o.key == k.key; }))
          out.push_back(std::move(k));
    return out;
  }();
  return keys;
}

bool is_sweep_axis(const std::string& key) {
  return key.rfind("sweep.", 0) == 0 && key != "sweep.mode" && is_known_key(key.substr(6));
}

bool uses(const Command& c, const std::string& key) {
  if (is_sweep_axis(key)) return c.name == "run" || c.name == "sweep";
  const std::vector<KeyDecl> keys = c.keys();
  return std::any_of(keys.begin(), keys.end(), [&](const KeyDecl& k) { return k.key == key; });
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> table = declare_commands();
  return table;
}

const Command& find_command(const std::string& name) {
  for (const Command& c : commands())
    if (c.name == name) return c;
  throw UsageError("unknown command '" + name + "' (allowed: " + command_names() + "; see rcsim --help)");
}

std::string command_names() {
  std::vector<std::string> names;
  for (const Command& c : commands()) names.push_back(c.name);
  return joined(names);
}

std::string command_summaries() {
  std::ostringstream os;
  for (const Command& c : commands()) os << hanging_text("  " + c.name, c.summary, 16, 1);
  return os.str();
}

std::string geometry_help_text() {
  std::ostringstream os;
  os << "\ngeometry commands (docs/user/geometry.md), each with its own keys:\n";
  for (const CommandSpec& c : geometry_commands()) {
    os << "  rcsim " << c.name << " [--key=value ...]\n      " << c.summary << "\n";
    os << keys_help_plain(c.keys);
  }
  return os.str();
}

std::vector<std::string> commands_using(const std::string& key) {
  std::vector<std::string> names;
  for (const Command& c : commands())
    if (uses(c, key)) names.push_back(c.name);
  return names;
}

void refuse_keys_of_other_commands(const Command& c, const Invocation& inv) {
  const std::vector<KeyDecl>& keys = all_keys();
  std::vector<KeyEntry> given, in_file;
  std::vector<std::string> positionals;  // file names of analyze, the value of a short option
  try {
    given = read_command_line_entries(inv.keys, keys, &positionals);
    if (inv.config_file && !c.shares_run_files) in_file = read_ini_entries(*inv.config_file, keys);
  } catch (const UsageError&) {
    return;  // a malformed argument or file: the command's own parser names it
  }
  auto known = [](const KeyEntry& e) { return e.known || is_sweep_axis(e.key); };
  if (!std::all_of(given.begin(), given.end(), known) || !std::all_of(in_file.begin(), in_file.end(), known))
    return;  // an unknown key first, with the nearest known one (the command's own parser)
  auto refuse = [&](const KeyEntry& e, const std::string& where) {
    if (uses(c, e.key)) return;
    throw UsageError(c.name + ": key '" + printable(e.key) + "'" + where + " is not used by rcsim " + c.name +
                     " (it is used by: " + joined(commands_using(e.key)) + "); remove it (rcsim " + c.name +
                     " --help lists what it reads)");
  };
  for (const KeyEntry& e : given) refuse(e, "");
  for (const KeyEntry& e : in_file) refuse(e, " in configuration file '" + printable(*inv.config_file) + "'");
}

void drop_unused_file_keys(const std::string& command, ParsedArgs& p) {
  for (auto it = p.values.begin(); it != p.values.end();) {
    if (is_known_key(it->first) && !key_decl(it->first).used_by(command)) {
      spdlog::warn("{}: key '{}' of the configuration file is not used, ignored", command, printable(it->first));
      it = p.values.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace rcsim
