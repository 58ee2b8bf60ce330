#include "cli/cli.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <iostream>
#include <sstream>

#include "app/logger.hpp"
#include "cli/command_table.hpp"
#include "io/hdf5_file.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/support/version.hpp"

namespace rcsim {

namespace {

const char* kOverview = R"(rcsim: simulator of rank collapse in deep self-attention

usage: rcsim COMMAND [--config FILE] [--key=value ...] [options]

commands:
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
  os << kOverview << command_summaries() << kOverviewEnd;
  return os.str();
}

// The command's short spellings (-v) as their options (--verbose).
std::vector<std::string> spelled_out(const Command& c, std::vector<std::string> keys) {
  for (std::string& a : keys)
    for (const auto& [alias, option] : c.aliases)
      if (a == alias) a = option;
  return keys;
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
      std::cout << find_command(inv.command).help();
      return 0;
    }
    if (inv.help || inv.command.empty()) {
      std::cout << help_text();
      if (inv.command.empty() && !inv.help) {
        std::cerr << "rcsim: error: no command given (" << command_names() << ")\n";
        return 2;
      }
      return 0;
    }
    const Command& command = find_command(inv.command);
    Invocation given = inv;
    given.keys = spelled_out(command, inv.keys);
    refuse_keys_of_other_commands(command, given);
    return command.run(given, args);
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
