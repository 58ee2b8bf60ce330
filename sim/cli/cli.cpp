#include "cli/cli.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <iostream>
#include <sstream>

#include "app/logger.hpp"
#include "cli/cli_geometry.hpp"
#include "cli/commands.hpp"
#include "io/hdf5_file.hpp"
#include "kernel/errors.hpp"
#include "kernel/printable.hpp"
#include "kernel/simulation.hpp"
#include "kernel/version.hpp"

namespace rcsim {

namespace {

const char* kOverview = R"(rcsim: simulator of rank collapse in deep self-attention

usage: rcsim COMMAND [--config FILE] [--key=value ...] [options]

commands:
  run           simulate trials of an L-layer attention stack; every layer's measures to HDF5
  sweep         the same as run (a configuration with a [sweep] section runs every point)
  mask-info     print the mask, its centre nodes, radius and connectivity
  equilibria    iterate fixed weights to equilibria; classify them and their basins
  analyze       decay rates (exponential phase found automatically), collapse depth and the
                theory bound of run files or sweep directories; a table per sweep
  generate      token ids from a pretrained llama2.c checkpoint (greedy or sampled); with
                --measure its stack's per-layer measures to HDF5
)";

const char* kOverviewEnd = R"(
  rcsim COMMAND --help   the command's usage, options and keys
  rcsim --help-keys      every configuration key of run/sweep/mask-info/equilibria with its
                         default and meaning
  rcsim --version, -V    the version and how this rcsim was built

exit status: 0 success, 1 runtime error, 2 usage error, 130 interrupted.
)";

std::string keys_help_text() {
  return "configuration keys of run, sweep, mask-info and equilibria (default; meaning; allowed values):\n" +
         keys_help_plain(run_keys());
}

std::string help_text() {
  std::ostringstream os;
  os << kOverview << geometry_command_summaries() << kOverviewEnd;
  return os.str();
}

// `rcsim COMMAND --help`.
std::string command_help(const std::string& command) {
  if (command == "run" || command == "sweep")
    return run_help();
  if (command == "mask-info") return mask_info_help();
  if (command == "equilibria") return equilibria_help();
  if (command == "analyze") return analyze_help();
  if (command == "generate") return generate_help();
  if (is_geometry_command(command)) return geometry_command_help(command);
  throw UsageError("unknown command '" + command +
                   "' (allowed: run, sweep, mask-info, equilibria, analyze, generate, keys, brody-map, brody-example, ln-geometry; see rcsim --help)");
}

}  // namespace

int cli_main(const std::vector<std::string>& args) {
  install_logger();
  // A write beyond the file-size limit (ulimit -f) fails with EFBIG and is reported like a full
  // disk, instead of killing the process halfway through a file.
  std::signal(SIGXFSZ, SIG_IGN);
  // Run files and checkpoints are written on disk by HDF5: a file whose close failed (full disk)
  // must not be closed again by HDF5 at exit (a crash after the clear error).
  h5::no_close_at_exit();
  try {
    const std::string missing = missing_instruction_sets();
    if (!missing.empty()) {
      std::cerr << "rcsim: error: this rcsim was built for " << instruction_set() << " but this CPU lacks " << missing
                << "; rebuild on this machine, or configure with -DRCSIM_NATIVE=OFF for a portable binary\n";
      return 1;
    }
    const Invocation inv = split_args(args);
    spdlog::set_level(inv.quiet ? spdlog::level::warn : spdlog::level::info);
    if (std::find(args.begin(), args.end(), "--version") != args.end() ||
        std::find(args.begin(), args.end(), "-V") != args.end()) {
      std::cout << "rcsim " << version() << " (git " << git_sha() << ", source " << source_tree()
                << ", isa=" << instruction_set() << ", " << compiler() << ", " << build_type() << ")\n";
      return 0;
    }
    if (std::find(args.begin(), args.end(), "--help-keys=markdown") != args.end()) {
      std::cout << keys_table_markdown(run_keys());
      return 0;
    }
    if (std::find(args.begin(), args.end(), "--help-keys") != args.end()) {
      std::cout << keys_help_text() << geometry_help_text();
      return 0;
    }
    if (inv.help && !inv.command.empty()) {
      std::cout << command_help(inv.command);
      return 0;
    }
    if (inv.help || inv.command.empty()) {
      std::cout << help_text();
      if (inv.command.empty() && !inv.help) {
        std::cerr << "rcsim: error: no command given (run, sweep, mask-info, equilibria, analyze, generate, keys, brody-map, brody-example, ln-geometry)\n";
        return 2;
      }
      return 0;
    }
    if (inv.command == "run" || inv.command == "sweep") return cmd_run(inv, args);
    if (inv.command == "mask-info") return cmd_mask_info(inv);
    if (inv.command == "analyze") return cmd_analyze(inv);
    if (inv.command == "generate") return cmd_generate(inv, args);
    if (inv.command == "equilibria") return cmd_equilibria(inv, args);
    if (is_geometry_command(inv.command)) {
      // brody-map polls the cancel flag between draws; the other geometry commands do not, so they
      // keep the default action: SIGINT and SIGTERM end them at once (their output is written to
      // an exclusive temporary and renamed when complete; a rerun removes a stale temporary).
      if (inv.command == "brody-map") {
        std::signal(SIGINT, on_signal);
        std::signal(SIGTERM, on_signal);
      }
      return run_geometry_command(inv.command, inv.keys, inv.config_file, command_line_text(args), inv.quiet,
                                  inv.force, &g_cancel);
    }
    throw UsageError("unknown command '" + inv.command +
                     "' (allowed: run, sweep, mask-info, equilibria, analyze, generate, keys, brody-map, brody-example, ln-geometry; see rcsim --help)");
  } catch (const UsageError& e) {
    std::cerr << "rcsim: error: " << printable(e.what(), kMessageLimit) << "\n";
    return 2;
  } catch (const Interrupted&) {
    std::cerr << "rcsim: interrupted; completed outputs are kept and completed trials of the run in progress are "
                 "checkpointed (NAME.h5.partial): rerun the same command to resume\n";
    return 130;
  } catch (const std::bad_alloc&) {
    std::cerr << "rcsim: error: out of memory (a request for memory failed; "
                 "'rcsim run --dry-run' prints the estimated memory of a run)\n";
    return 1;
  } catch (const std::length_error& e) {
    std::cerr << "rcsim: error: out of memory (a size beyond what can be allocated: " << printable(e.what()) << ")\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "rcsim: error: " << printable(e.what(), kMessageLimit) << "\n";
    return 1;
  }
}

}  // namespace rcsim
