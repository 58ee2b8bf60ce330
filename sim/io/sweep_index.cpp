#include "io/sweep_index.hpp"

#include <filesystem>
#include <set>
#include <sstream>

#include "kernel/support/errors.hpp"
#include "io/output_file.hpp"
#include "io/hdf5_file.hpp"
#include "io/run_file.hpp"
#include "kernel/support/version.hpp"
#include "kernel/support/printable.hpp"
#include "io/checked_read.hpp"

namespace fs = std::filesystem;

namespace rcsim {

std::string to_string(PointStatus s) {
  switch (s) {
    case PointStatus::pending:
      return "pending";
    case PointStatus::complete:
      return "complete";
    case PointStatus::failed:
      return "failed";
  }
  return "?";
}

std::string sweep_definition(const std::vector<SweepPoint>& points, const SweepAxes& axes, const std::string& mode) {
  // Dotted keys first (no section), then the axes as the [sweep] section of an INI file, so
  // that a difference reads in the configuration's own vocabulary ("sweep.model.d_qk").
  std::ostringstream os;
  os << "# rcsim sweep definition: mode, base configuration (first point, swept keys omitted), axes\n";
  os << "sweep.mode = " << mode << "\n";
  std::set<std::string> swept;
  for (const auto& axis : axes) swept.insert(axis.first);
  if (!points.empty())
    for (const auto& [key, value] : points.front().config.values)
      if (!swept.count(key) && key != "output.file") os << key << " = " << value << "\n";
  os << "\n[sweep]\n";
  for (const auto& [key, values] : axes) {
    os << key << " =";
    for (std::size_t i = 0; i < values.size(); ++i) os << (i ? ", " : " ") << values[i];
    os << "\n";
  }
  return os.str();
}

std::string sweep_index_path(const std::string& dir) { return (fs::path(dir) / "index.h5").string(); }

void write_sweep_index(const std::string& path, const std::string& definition, const std::string& mode,
                       const SweepAxes& axes, const std::vector<SweepPoint>& points,
                       const std::vector<PointStatus>& status) {
  OutputFile file(path, {});  // the caller holds the sweep directory's lock
  const std::size_t n = points.size();
  int complete = 0, failed = 0;
  for (const PointStatus s : status) {
    complete += s == PointStatus::complete;
    failed += s == PointStatus::failed;
  }
  FileHeader header{"rcsim-sweep-index", kSweepIndexFormatVersion, std::nullopt, "updated_utc", false};
  file.write_hdf5(header, [&](const h5::File& f) {
    f.set_attr("sweep_mode", mode);
    f.set_attr("points", static_cast<std::int64_t>(n));
    f.set_attr("points_complete", complete);
    f.set_attr("points_failed", failed);
    f.write_string("definition", definition)
        .set_attr("long_name", "sweep definition: mode, axes and base configuration (a rerun must match it)");

    std::vector<std::int64_t> ids(n);
    std::vector<std::string> names, files, states;
    for (std::size_t i = 0; i < n; ++i) {
      ids[i] = static_cast<std::int64_t>(i);
      names.push_back(points[i].name);
      files.push_back(fs::path(points[i].config.output.file).filename().string());
      states.push_back(to_string(status.at(i)));
    }
    // The point coordinate, at the root and in /parameters (xarray.open_dataset(file, group=...)).
    const std::string point_long_name = "point index, in expansion order (product: last axis fastest)";
    f.write_coordinate("point", ids, point_long_name);
    auto column = [&](const h5::Group& g, const std::string& name, const std::vector<std::string>& v,
                      const std::string& long_name) {
      const h5::Dataset ds = g.write_strings(name, v);
      ds.set_attr("long_name", long_name);
      g.label_axes(ds, {"point"});
    };
    column(f, "name", names, "point name (the swept key=value pairs)");
    column(f, "file", files, "run file of the point, relative to the index's directory");
    column(f, "status", states, "pending | complete | failed");
    const h5::Group params = f.create_group("parameters");
    params.set_attr("long_name", "the swept keys' values at each point, as text (one dataset per key)");
    params.write_coordinate("point", ids, point_long_name);
    std::vector<std::string> keys;
    for (const auto& [key, values] : axes) {
      (void)values;
      keys.push_back(key);
      std::vector<std::string> v;
      for (const auto& p : points) v.push_back(p.values.at(key));
      column(params, key, v, "value of configuration key " + key);
    }
    const h5::Dataset key_list = f.write_strings("keys", keys);
    key_list.set_attr("long_name", "the swept configuration keys, in axis order");
    f.label_axes(key_list, {"axis"});
  });
}

std::optional<std::string> read_sweep_definition(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  try {
    const h5::File f = h5::File::open_read(path);
    if (f.attr_string("filetype") != "rcsim-sweep-index") return std::nullopt;
    return f.read_string("definition");
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::vector<std::string> read_sweep_status(const std::string& path) {
  return h5::File::open_read(path).read_strings("status");
}

bool is_sweep_index(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  try {
    const h5::File f = h5::File::open_read(path);
    return f.has_attr("filetype") && f.attr_string("filetype") == "rcsim-sweep-index";
  } catch (const std::exception&) {
    return false;
  }
}

SweepIndex read_sweep_index(const std::string& path) {
  if (!is_sweep_index(path))
    throw UsageError("'" + path + "': not an rcsim sweep index (an HDF5 file with filetype = rcsim-sweep-index)");
  const h5::File f = h5::File::open_read(path);
  SweepIndex out;
  out.path = path;
  out.directory = fs::path(path).parent_path().string();
  out.keys = f.read_strings("keys");
  const std::vector<std::string> names = f.read_strings("name"), files = f.read_strings("file"),
                                 status = f.read_strings("status");
  std::vector<std::vector<std::string>> values;
  for (const std::string& k : out.keys) values.push_back(f.read_strings("parameters/" + k));
  // Every list has one entry per point; a point's file stays inside the sweep directory.
  auto require_points = [&](const std::vector<std::string>& list, const std::string& what) {
    if (list.size() != names.size())
      throw UsageError("sweep index '" + printable(path) + "': /" + printable(what) + " has " +
                       std::to_string(list.size()) + " entries, expected " + std::to_string(names.size()) +
                       " (one per point, as /name)");
  };
  require_points(files, "file");
  require_points(status, "status");
  for (std::size_t k = 0; k < values.size(); ++k) require_points(values[k], "parameters/" + out.keys[k]);
  for (const std::string& file : files) h5::require_inside_directory(file, path);
  for (std::size_t i = 0; i < names.size(); ++i) {
    SweepIndexPoint p;
    p.name = names[i];
    p.file = (fs::path(out.directory) / files.at(i)).string();
    p.status = status.at(i);
    for (const auto& v : values) p.values.push_back(v.at(i));
    out.points.push_back(std::move(p));
  }
  return out;
}

}  // namespace rcsim
