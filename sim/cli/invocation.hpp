// What every command of the command line shares: the split argument list (Invocation), the
// configuration sources of a command line, the cancel flag set by SIGINT/SIGTERM, and the
// length limit of an error line.
#pragma once

#include <atomic>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "app/logger.hpp"  // kMessageLimit
#include "config/config.hpp"

namespace rcsim {

// Set by SIGINT/SIGTERM once on_signal is installed; polled by long computations.
extern std::atomic<bool> g_cancel;
extern "C" void on_signal(int sig);

// A command line split into the command, the common options and everything else.
struct Invocation {
  std::string command;
  std::optional<std::string> config_file;
  bool dry_run = false, force = false, quiet = false, help = false;
  std::vector<std::string> keys;  // --key=value arguments for the configuration parser
};

Invocation split_args(const std::vector<std::string>& args);

// Configuration sources: the key defaults, then the file (if any), then the command line.
ParsedArgs resolve_sources(const Invocation& inv);

// A key given on the command line replaces a sweep axis of the same name.
void drop_overridden_axes(ParsedArgs& p, const Invocation& inv);

// "rcsim ARG ...", as recorded in output files.
std::string command_line_text(const std::vector<std::string>& args);

// A command's own numeric option: "--tol=abc" is a usage error naming the option.
double parse_number(const std::string& option, const std::string& text);

// "--name value" as "--name=value" for a command's own options (as the configuration keys allow).
std::vector<std::string> join_option_values(const std::vector<std::string>& args,
                                            std::initializer_list<const char*> options);

// A number as the shortest text that reads back as the same double (a declared default
// taken from an options struct, so that the default is written in one place).
std::string number_text(double x);

// `text` wrapped at kHelpWidth columns from `column` on, after `head` (at least `gap` spaces
// after it; a longer head stands on a line of its own): one entry of a help list.
constexpr std::size_t kHelpWidth = 96;
std::string hanging_text(const std::string& head, const std::string& text, std::size_t column, std::size_t gap);

// A command's own options (KeyDecls without a section: --name=VALUE on the command line,
// `name = value` before any section of an INI file), one line or two each, for its --help.
std::string options_help(const std::vector<KeyDecl>& options);

// The dotted keys' names by section ("  model: tokens, dim, ..."), wrapped at kHelpWidth: the
// short list of a command's --help.
std::string key_names_by_section(const std::vector<KeyDecl>& keys);

// Every key of run, sweep, mask-info and equilibria, and the [sweep] section's mode.
std::vector<KeyDecl> run_keys();

}  // namespace rcsim
