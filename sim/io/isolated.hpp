// Run a piece of work in a child process (fork), so that a crash inside a library cannot take
// rcsim down with it. Used where rcsim must process a file it did not write intact: libhdf5
// (1.10) can crash on a byte-corrupted file's metadata (e.g. a damaged DIMENSION_LIST attribute
// while rewriting it) instead of returning an error; `rcsim analyze` therefore writes its new
// file in a child and reports such a crash as one error line (exit 1), never as a signal.
#pragma once

#include <functional>
#include <string>

namespace rcsim {

// Run `work` in a child process and wait for it. The child's UsageError is rethrown here with its
// message; any other exception as RuntimeError("WHAT: message"). If the child is killed by a
// signal, throw RuntimeError("WHAT failed: ... (signal N)"). With `seconds` > 0, a child still
// running after that long is killed and RuntimeError("WHAT failed: ... did not finish within N s")
// thrown: libhdf5 can also loop forever on a corrupted file (seen in H5HG_read, a damaged
// variable-length attribute, under AddressSanitizer's memory layout). The child ends with _exit
// (no destructors or atexit handlers of the parent's objects run there: locks stay held by the
// parent). Only for work without threads of its own; the caller holds no open HDF5 objects it
// needs afterwards (the child works on its own copy of the process).
void run_isolated(const std::function<void()>& work, const std::string& what, double seconds = 0);

// A time limit for work that reads (or rewrites) the file at `path` in run_isolated: 30 s plus
// 1 s per 5 MB of the file (reading runs at hundreds of MB/s; this only catches a library that
// loops). 30 s if the file's size cannot be read.
double isolated_time_limit(const std::string& path);

}  // namespace rcsim
