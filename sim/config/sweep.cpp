#include "config/sweep.hpp"

#include <cstdio>

#include <cctype>
#include <set>

#include "kernel/support/errors.hpp"

namespace rcsim {

std::string sweep_directory(const std::string& file) {
  const std::string ext = ".h5";
  if (file.size() > ext.size() && file.compare(file.size() - ext.size(), ext.size(), ext) == 0)
    return file.substr(0, file.size() - ext.size());
  return file + ".d";
}

namespace {
std::string sanitize(const std::string& s) {
  std::string out;
  for (char ch : s) out += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '_') ? ch : '_';
  return out;
}
}  // namespace

void require_sweep_size(const std::vector<std::pair<std::string, std::vector<std::string>>>& axes) {
  // Counted before anything is expanded (in double: a product of many lists overflows integers).
  double points = 1.0;
  std::string sizes;
  for (const auto& [key, values] : axes) {
    points *= static_cast<double>(values.size());
    sizes += (sizes.empty() ? "" : " x ") + std::to_string(values.size()) + " (" + key + ")";
  }
  if (points > kMaxSweepPoints) {
    char count[32];
    std::snprintf(count, sizeof count, "%.4g", points);
    throw UsageError(std::string("[sweep]: the product sweep has ") + count + " points, " + sizes +
                     "; at most " + std::to_string(static_cast<long>(kMaxSweepPoints)) +
                     " are allowed (split it into several sweeps, or use sweep.mode = zip)");
  }
}

std::vector<SweepPoint> expand_sweep(const std::map<std::string, std::string>& base,
                                     const std::vector<std::pair<std::string, std::vector<std::string>>>& axes,
                                     const std::string& mode) {
  std::vector<std::map<std::string, std::string>> combos;
  if (mode == "zip") {
    const std::size_t n = axes.empty() ? 0 : axes.front().second.size();
    for (const auto& [key, values] : axes)
      if (values.size() != n)
        throw UsageError("sweep.mode = zip: key 'sweep." + key + "' has " + std::to_string(values.size()) +
                         " values, 'sweep." + axes.front().first + "' has " + std::to_string(n) +
                         "; zipped lists must have equal lengths");
    for (std::size_t i = 0; i < n; ++i) {
      std::map<std::string, std::string> m;
      for (const auto& [key, values] : axes) m[key] = values[i];
      combos.push_back(m);
    }
  } else {
    require_sweep_size(axes);
    combos.emplace_back();
    for (const auto& [key, values] : axes) {
      std::vector<std::map<std::string, std::string>> next;
      for (const auto& partial : combos)
        for (const auto& v : values) {
          auto m = partial;
          m[key] = v;
          next.push_back(m);
        }
      combos = std::move(next);
    }
  }
  const auto base_file = base.count("output.file") ? base.at("output.file") : std::string("data/run.h5");
  const std::string dir = sweep_directory(base_file);
  std::vector<SweepPoint> points;
  std::set<std::string> names;
  for (const auto& combo : combos) {
    SweepPoint p;
    for (const auto& [key, values] : axes) {
      (void)values;
      p.name += (p.name.empty() ? "" : "__") + key + "=" + sanitize(combo.at(key));
    }
    p.values = combo;
    auto all = base;
    for (const auto& [k, v] : combo) all[k] = v;
    all["output.file"] = dir + "/" + p.name + ".h5";
    try {
      p.config = make_config(all);
    } catch (const UsageError& e) {
      throw UsageError("sweep point " + p.name + ": " + e.what());
    }
    if (!names.insert(p.name).second)
      throw UsageError("sweep point " + p.name + " repeats: a [sweep] list holds the same value twice, or values "
                         "that differ only in characters replaced in file names");
    points.push_back(std::move(p));
  }
  return points;
}

}  // namespace rcsim
