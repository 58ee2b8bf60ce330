#include "cli/commands.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>

#include "app/equilibria.hpp"
#include "cli/command_table.hpp"
#include "io/hdf5_file.hpp"
#include "io/inputs.hpp"
#include "io/output_file.hpp"
#include "io/run_file.hpp"
#include "io/safe_file.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {

const char* kEquilibriaUsage = R"(usage: rcsim equilibria --config FILE [--key=value ...] [--tol=X] [--perturbation=X]
                        [--probes=K] [--match-tol=X] [--rank-rtol=X] [--verbose] [--dry-run] [--force]

  Under fixed weights (weights.q/k/v/o = fixed, zero, identity or file), iterate run.trials random
  starting points (init.*) for at most model.layers layers until ||X(t+1) - X(t)||_F < --tol;
  classify each end state (rank, identical/antipodal/distinct tokens, stability under
  perturbations) and write end states, distinct equilibria and basin fractions to output.file
  (docs/science/equilibria.md). Prints a summary (equilibria by rank and type, basin fractions) after
  the table of distinct equilibria, whose first 20 rows are shown unless --verbose.

options (also as `name = value` lines before the first section of the --config file):
)";

}  // namespace

// The options of rcsim equilibria besides the configuration keys, declared once: parsed with the
// keys by parse_config_sources, listed by --help.
std::vector<KeyDecl> equilibria_options() {
  const EquilibriumOptions d;
  KeyDecl probes{"probes", std::to_string(d.probes), "perturbations per end state"};
  probes.allowed_text = "K";
  KeyDecl verbose{"verbose", "false", "print every row of the table of distinct equilibria (also -v)"};
  verbose.kind = KeyKind::boolean;
  verbose.flag = true;
  return {{"tol", number_text(d.tol), "convergence tolerance"},
          {"perturbation", number_text(d.perturbation), "relative size of the stability probes"},
          probes,
          {"match-tol", number_text(d.match_tol), "distance under which two end states are the same equilibrium"},
          {"rank-rtol", number_text(d.rank_rtol), "relative tolerance of the numerical rank"},
          verbose};
}

namespace {

EquilibriumOptions equilibrium_options(const KeyValues& v) {
  EquilibriumOptions o;
  o.tol = parse_number("--tol", v.at("tol"));
  o.perturbation = parse_number("--perturbation", v.at("perturbation"));
  const double probes = parse_number("--probes", v.at("probes"));
  constexpr double kMaxProbes = 1e6;  // each probe is a full iteration from a perturbed end state
  if (!(probes >= 1 && probes <= kMaxProbes) || probes != std::floor(probes))
    throw UsageError("--probes=" + printable(v.at("probes")) + ": expected a whole number from 1 to 1000000");
  o.probes = static_cast<int>(probes);
  o.match_tol = parse_number("--match-tol", v.at("match-tol"));
  o.rank_rtol = parse_number("--rank-rtol", v.at("rank-rtol"));
  validate(o);
  return o;
}

}  // namespace

int cmd_equilibria(const Invocation& inv, const std::vector<std::string>& args) {
  ParsedArgs p = parse_config_sources(inv.keys, inv.config_file, equilibria_options());
  const EquilibriumOptions o = equilibrium_options(p.options);
  const bool verbose = parse_bool_value("verbose", p.options.at("verbose"));
  if (!p.sweep.empty()) throw UsageError("equilibria: a [sweep] section is not supported (one configuration at a time)");
  drop_unused_file_keys("equilibria", p);  // those of the command line are refused (command_table.cpp)
  const Config c = make_config(p.values);
  FixedLayerMap check(c);  // fixed weights, before anything is written
  (void)check;
  const InputDigests inputs = input_digests(c);  // the identity: configuration and inputs' content
  if (inv.dry_run) {
    std::cout << c.to_ini() << "\n# output: " << c.output.file << "\n";
    return 0;
  }
  const std::string& out = c.output.file;
  h5::check_replaceable(out, "output.file", "rcsim-equilibria", inv.force);
  if (!inv.force && std::filesystem::exists(out)) {
    try {
      const h5::File f = h5::File::open_read(out);
      const h5::Dataset config = f.open_dataset("config");
      const std::string digests = config.has_attr("input_sha256") ? config.attr_string("input_sha256") : "";
      if (f.has_attr("complete") && f.attr_int("complete") == 1 && f.read_string("config") == c.to_ini() &&
          digest_difference(digests, inputs).empty()) {
        spdlog::info("{} is complete with the same configuration: skipped (--force to recompute)", out);
        return 0;
      }
    } catch (const std::exception&) {
    }
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  OutputFile file(out, {"output.file", "output '" + out + "'"});  // fails fast on an unwritable directory
  const EquilibriumSearch s = find_equilibria(c, o, &g_cancel);
  check_inputs_unchanged(inputs);
  std::cout << equilibria_table(s, verbose) << std::flush;
  write_equilibria_file(file, c, o, s, command_line_text(args), inputs);
  spdlog::info("wrote {}", out);
  return 0;
}


std::string equilibria_help() {
  std::vector<KeyDecl> keys;
  for (const KeyDecl& k : config_keys())
    if (k.used_by("equilibria")) keys.push_back(k);
  return kEquilibriaUsage + options_help(equilibria_options()) + "  --dry-run, --force, --quiet   as for run\n" +
         "\nconfiguration keys it reads (rcsim --help-keys: defaults and meanings; another key is refused):\n" +
         key_names_by_section(keys);
}

}  // namespace rcsim
