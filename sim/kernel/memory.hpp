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

}  // namespace rcsim
