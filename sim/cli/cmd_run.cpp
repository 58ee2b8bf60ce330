#include "cli/commands.hpp"

#include <csignal>
#include <iostream>
#include <sstream>

#include "app/sweep_runner.hpp"

namespace rcsim {

namespace {

const char* kRunHelp = R"(usage: rcsim run [--config FILE] [--key=value ...] [--dry-run] [--force] [--quiet]
       rcsim sweep ...   (the same)

  Simulate run.trials independent trials of an L-layer attention stack and write the measures
  of every layer to output.file (HDF5). Without --config: one run of the key defaults
  (configs/default.ini is the comparison sweep of scripts/run-default.sh). A [sweep] section
  (sweep.KEY = v1, v2, ...) runs one file per point into the directory output.file minus
  ".h5", with an index (index.h5); completed points are skipped on rerun. Under mpirun (built
  with -DRCSIM_MPI=ON) the points are shared among the ranks.

options:
  --config FILE   INI file: [section] key = value, for the dotted keys
  --key=value     any configuration key (also --key value); the command line wins over the file
  --dry-run       print the resolved configuration and planned outputs; write nothing
  --force         recompute complete outputs; overwrite outputs (or a sweep index) of another
                  configuration, or files that are not complete rcsim run files
  --quiet         only warnings and errors on stderr (no progress)
)";

}  // namespace

int cmd_run(const Invocation& inv, const std::vector<std::string>& args) {
  RunRequest request;
  request.sources = resolve_sources(inv);
  drop_overridden_axes(request.sources, inv);
  request.dry_run = inv.dry_run;
  request.force = inv.force;
  request.quiet = inv.quiet;
  request.command_line = command_line_text(args);
  request.cancel = &g_cancel;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  return run_points(request, std::cout).exit_code;
}

std::string run_help() {
  return std::string(kRunHelp) + "\nconfiguration keys (rcsim --help-keys: defaults and meanings):\n" +
         key_names_by_section(config_keys()) +
         "  sweep: mode, and sweep.KEY = v1, v2, ... for any key\n";
}

}  // namespace rcsim
