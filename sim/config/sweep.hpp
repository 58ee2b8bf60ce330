// Parameter sweeps: a base configuration and a [sweep] section whose keys are configuration keys
// and whose values are comma lists. `sweep.mode = product` (default) runs the Cartesian product,
// `zip` pairs the lists element by element (they must have equal lengths).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace rcsim {

struct SweepPoint {
  std::string name;                             // e.g. "mask.type=causal__norm.type=sphere"
  std::map<std::string, std::string> values;    // the swept keys' values at this point
  Config config;                                // resolved, output.file set to the point's file
};

// The largest product sweep expand_sweep accepts: each point is a resolved Config in memory and
// a run file on disk, so a larger grid is a mistake to refuse before expanding it.
constexpr double kMaxSweepPoints = 100000;
// UsageError naming the number of points and each list's length when the product of the lists'
// lengths exceeds kMaxSweepPoints (counted without expanding).
void require_sweep_size(const std::vector<std::pair<std::string, std::vector<std::string>>>& axes);

// Expand a sweep. `base` holds the non-swept key values; the point files are written into the
// directory `output.file` without its ".h5" suffix. Every point is validated (UsageError).
std::vector<SweepPoint> expand_sweep(const std::map<std::string, std::string>& base,
                                     const std::vector<std::pair<std::string, std::vector<std::string>>>& axes,
                                     const std::string& mode);

// The directory of a sweep whose output.file is `file`.
std::string sweep_directory(const std::string& file);

}  // namespace rcsim
