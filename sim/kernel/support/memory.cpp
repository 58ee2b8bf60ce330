#include "kernel/support/memory.hpp"

#include <unistd.h>

#include <cstdio>

#include "kernel/support/errors.hpp"

namespace rcsim {

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || size <= 0) return 1e300;
  return static_cast<double>(pages) * static_cast<double>(size);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 1000.0 && u < 6) {
    bytes /= 1000.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", bytes, units[u]);
  return buf;
}

void require_memory(double bytes, const std::string& what, const std::string& hint) {
  const double have = physical_memory_bytes();
  if (bytes > have)
    throw UsageError(what + " would need about " + format_bytes(bytes) + " of memory, more than this machine's " +
                     format_bytes(have) + "; " + hint);
}

}  // namespace rcsim
