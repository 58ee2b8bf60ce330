// The runner of `rcsim run` / `rcsim sweep` and of rcsim.sweep (Python): the points of a
// configuration (one, or every point of its [sweep] section), checked against what is on disk
// (complete points are skipped, foreign files and outputs of another configuration refused),
// computed in turn (under mpirun shared among the ranks), each into its run file, and the sweep's
// index written after every point (io/sweep_index.hpp; docs/user/sweeps.md).
#pragma once

#include <atomic>
#include <cstddef>
#include <ostream>
#include <string>

#include "app/progress.hpp"
#include "config/config.hpp"

namespace rcsim {

// What a run asks for: the configuration's sources (values and [sweep] section, as
// parse_config_sources returns them, a key given on the command line already replacing the axis
// of the same name), and how.
struct RunRequest {
  ParsedArgs sources;
  bool dry_run = false;  // print the resolved configuration and the planned outputs to `out`; write nothing
  bool force = false;    // recompute complete outputs; replace outputs of another configuration
  bool quiet = false;    // no progress on stderr
  std::string command_line;                 // recorded in the files ("rcsim run ...", "rcsim.sweep(...)")
  const std::atomic<bool>* cancel = nullptr;  // polled between points and layers (Ctrl-C)
  Progress::Observer progress;                // told the progress at every update (any thread of the run)
};

// What became of the points: the exit status (0; under a sweep a failed point does not stop the
// others: 2 when one failed on a usage error, else 1), the index (empty without a [sweep]).
struct RunOutcome {
  int exit_code = 0;
  std::string index_path;
  std::size_t points = 0, complete = 0, failed = 0;
};

// Run every point of the request (UsageError before anything is computed for a conflict or an
// input that cannot be read; Interrupted after the index is written when `cancel` was set).
RunOutcome run_points(const RunRequest& request, std::ostream& out);

}  // namespace rcsim
