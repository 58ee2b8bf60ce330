// Memory of this machine and of a run, for refusing what cannot fit before allocating it.
#pragma once

#include <string>

namespace rcsim {

// Physical memory of this machine in bytes (sysconf); a very large number if unknown.
double physical_memory_bytes();

// "1.5 GB", "320 MB", "12 kB" (powers of 1000).
std::string format_bytes(double bytes);

// Throw UsageError if `bytes` exceed the physical memory: "WHAT would need about X of memory,
// more than this machine's Y; HINT".
void require_memory(double bytes, const std::string& what, const std::string& hint);

// The cap on a run's large per-trial data (token snapshots, attention matrices, the spectrum)
// held in memory between checkpoint flushes: once the completed trials not yet checkpointed hold
// more, io/checkpoint.cpp flushes them and frees their large data (the run file reads them back
// from the checkpoint). 64 MB: small next to any machine that runs rcsim, large next to one
// trial of the runs that make big outputs (2 MB at N = d = 64 with 65 snapshots; 0.5 MB per
// N = d = 256 snapshot), so that a flush writes many trials at once; each flush copies the whole
// checkpoint, so a smaller cap costs more copying (docs/dev/memory.md).
inline constexpr double kPendingLargeBytes = 64e6;

}  // namespace rcsim
