// One run of a configuration into its run file (io/run_file.hpp), with the lock, the checkpoint
// and the exclusive temporary; or into an in-memory file image for Python.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "app/progress.hpp"
#include "config/config.hpp"
#include "io/run_file.hpp"
#include "kernel/trial/simulation.hpp"

namespace rcsim {

// Run `c` and write its file atomically: to `output.file`.tmp, renamed to `output.file` when
// complete; the temporary file is removed on any error or interruption. Completed trials are
// checkpointed to `output.file`.partial (see checkpoint.hpp) so that a rerun after a crash or
// Ctrl-C resumes. Creates missing parent directories. Returns the path written.
// `progress` (may be null) is told about every completed trial.
std::string run_to_file(const Config& c, const Provenance& p, const std::atomic<bool>* cancel,
                        Progress* progress);
// The same with a log-line progress (show_progress) or none.
std::string run_to_file(const Config& c, const Provenance& p, const std::atomic<bool>* cancel,
                        bool show_progress);

// Run `c` in memory and return the bytes of the run file that run_to_file would write (the
// same writer, into an HDF5 file image; nothing touches the disk, output.file only names the
// image). For the Python bindings (rcsim.simulate, docs/user/python.md). Throws Interrupted when
// `cancel` is set.
std::vector<char> run_to_image(const Config& c, const Provenance& p, const std::atomic<bool>* cancel);

// What a host program (Python) gives in place of files: the arrays of weights.file and init.file
// (InputArrays, checked against the shapes the configuration allows, as when read from files),
// the custom mask of mask.type = custom, and a progress callback (trials done, total; called
// from the worker threads under one lock).
struct HostInputs {
  std::optional<InputArrays> arrays;  // replaces reading weights.file and init.file
  std::optional<MaskMatrix> mask;     // replaces reading mask.file (mask.type = custom)
  std::function<void(int done, int total)> progress;
  std::atomic<long long>* layers_done = nullptr;  // counts the layers reached, over all trials
};
std::vector<char> run_to_image(const Config& c, const Provenance& p, const std::atomic<bool>* cancel,
                               const HostInputs& host);
// The engine set-up of `c` with the host's arrays and mask in place of the files (those not given
// are read from weights.file, init.file, mask.file). UsageError for a mask array with mask.type
// other than custom.
EngineSetup prepare_host(const Config& c, const HostInputs& host);

}  // namespace rcsim
