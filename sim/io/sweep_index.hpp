// The index of a sweep: DIR/index.h5 lists every point of the sweep, its swept parameters, its
// run file and its status (pending | complete | failed), with the sweep's definition. It is
// rewritten atomically (index.h5.tmp, then rename) whenever a point completes, so a crash
// leaves either the previous or the new index; the point files themselves are the authority on
// what is complete (a rerun checks them). Layout in README.md ("Sweep index").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/sweep.hpp"

namespace rcsim {

constexpr int kSweepIndexFormatVersion = 2;  // 2: /parameters carries its own point coordinate

enum class PointStatus { pending, complete, failed };
std::string to_string(PointStatus s);

using SweepAxes = std::vector<std::pair<std::string, std::vector<std::string>>>;

// The canonical text of a sweep definition: the mode, the axes with their values, and the
// resolved configuration of the first point without the swept keys and output.file. Two runs
// of the same sweep have the same text; any change of mode, axes or base keys changes it.
std::string sweep_definition(const std::vector<SweepPoint>& points, const SweepAxes& axes, const std::string& mode);

// The path of the index of the sweep whose points live in `dir`.
std::string sweep_index_path(const std::string& dir);

// Write the index atomically (path.tmp + rename).
void write_sweep_index(const std::string& path, const std::string& definition, const std::string& mode,
                       const SweepAxes& axes, const std::vector<SweepPoint>& points,
                       const std::vector<PointStatus>& status);

// True if `path` is an rcsim sweep index (root attribute filetype = "rcsim-sweep-index").
bool is_sweep_index(const std::string& path);

// The definition stored in an existing index; nullopt if there is none or it is unreadable.
std::optional<std::string> read_sweep_definition(const std::string& path);

// An index as read back: its directory, the swept keys, and per point its name, run file (the
// index's directory joined with the stored name), status and swept values (as text, key order).
struct SweepIndexPoint {
  std::string name, file, status;
  std::vector<std::string> values;
};
struct SweepIndex {
  std::string path, directory;
  std::vector<std::string> keys;
  std::vector<SweepIndexPoint> points;
};
// Read a sweep index (`path`: DIR/index.h5). UsageError naming the file if it is not one.
SweepIndex read_sweep_index(const std::string& path);

// The statuses stored in an index, in point order (for tests and tools).
std::vector<std::string> read_sweep_status(const std::string& path);

}  // namespace rcsim
