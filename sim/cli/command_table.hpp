// The commands of the command line in one table: name, one-line summary, help text, the keys and
// options each reads, and the function that runs it. `rcsim --help`, `rcsim COMMAND --help`, the
// list of commands in the message for an unknown command and the dispatch of cli.cpp all come
// from it, and so does the refusal of a key that a command does not use (naming the commands
// that use it): no key is silently ignored.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cli/invocation.hpp"

namespace rcsim {

struct Command {
  std::string name, summary;                    // summary: one line of `rcsim --help`
  std::function<std::string()> help;            // `rcsim NAME --help`
  std::function<std::vector<KeyDecl>()> keys;   // every key and option the command reads
  // Reads configuration files written for `rcsim run` (run, sweep, mask-info, equilibria): a key
  // of such a file that the command does not use is dropped with a warning, not refused.
  bool shares_run_files = false;
  std::vector<std::pair<std::string, std::string>> aliases;  // short spellings: {"-v", "--verbose"}
  // `args` is the whole command line, recorded in output files.
  std::function<int(const Invocation& inv, const std::vector<std::string>& args)> run;
};

// Every command, in the order of `rcsim --help`.
const std::vector<Command>& commands();
// The command of this name; UsageError naming the commands for any other.
const Command& find_command(const std::string& name);
// "run, sweep, mask-info, ...": the names, for messages.
std::string command_names();
// One line (or two) per command, name and summary: the list of `rcsim --help`.
std::string command_summaries();
// The keys of the geometry commands, for `rcsim --help-keys`.
std::string geometry_help_text();

// The names of the commands that read `key` (sweep.KEY: run and sweep).
std::vector<std::string> commands_using(const std::string& key);
// A usage error for the first key of the command line (and, for a command that does not share
// configuration files with `rcsim run`, of its file) that another command uses but `c` does not,
// naming the key, the command and the commands that use it. An argument no command knows is left
// to the command's own parser (which names the nearest known key).
void refuse_keys_of_other_commands(const Command& c, const Invocation& inv);
// The keys of a configuration file shared with `rcsim run` that `command` does not use
// (KeyDecl::commands): dropped, each with a warning, so that the run neither uses nor records them.
void drop_unused_file_keys(const std::string& command, ParsedArgs& p);

}  // namespace rcsim
