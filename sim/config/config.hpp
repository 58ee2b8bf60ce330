// The configuration vocabulary of rcsim: one set of dotted keys ("mask.type") that mean the same
// in an INI file ([mask] type = causal) and on the command line (--mask.type=causal).
// Precedence: command line > file > built-in defaults. Unknown keys are usage errors.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/key_sources.hpp"
#include "config/keys.hpp"
#include "config/names.hpp"
#include "config/values.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

struct Config : ModelSpec {
  // The resolved key -> value text of every key (defaults filled in, derived defaults made
  // explicit). Written to /config; reading it back reproduces the run bit for bit.
  std::map<std::string, std::string> values;

  // Keys of a [sweep] section: key -> list of values (empty for a plain run).
  std::vector<std::pair<std::string, std::vector<std::string>>> sweep;
  std::string sweep_mode = "product";

  // The configuration as INI text (sections from the dotted keys): the text stored in /config.
  std::string to_ini() const;
  // to_ini() for a reader (`rcsim run --dry-run`, rcsim.resolved_config): a key stored as `auto`
  // gets a comment with what it resolves to here ("beta = auto  # 0.5 = 1/sqrt(d_qk)") or why it
  // is unused. The same keys and values: it reads back as the same configuration.
  std::string to_ini_explained() const;
};

// Build a Config from key -> value text (missing keys take their defaults). Validates every
// value; throws UsageError naming the key and what is allowed.
Config make_config(const std::map<std::string, std::string>& overrides);

// Parse the command line (already split into the `--key=value` arguments) and an optional INI
// file into key -> value text, command line winning. Throws UsageError for unknown keys.
// A command with options of its own besides the keys (`rcsim equilibria --tol=X`) declares
// them in `command_options`: read from both sources by the same parser (in the file: `name =
// value` before any section) into `options`, defaults filled in.
struct ParsedArgs {
  std::map<std::string, std::string> values;
  std::vector<std::pair<std::string, std::vector<std::string>>> sweep;
  std::string sweep_mode = "product";
  KeyValues options;
};
// `args_where` names the source of `cli_args` in messages (read_command_line_entries).
ParsedArgs parse_config_sources(const std::vector<std::string>& cli_args,
                                const std::optional<std::string>& config_file,
                                const std::vector<KeyDecl>& command_options = {},
                                const std::string& args_where = kOnCommandLine);

// An upper bound on the number of layers parse_schedule(text, layers) records, without building
// the list (for refusing a run that cannot fit in memory before allocating anything).
double schedule_size_bound(const std::string& text, int layers);

// The layers at which measures are recorded, from an `output.schedule` value (see --help):
// ascending, unique, always containing 0 and L. Throws UsageError naming `output.schedule`.
std::vector<int> parse_schedule(const std::string& text, int layers);

}  // namespace rcsim
