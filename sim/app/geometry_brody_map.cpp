#include "app/geometry_command.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "geometry/brody.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/measures/summary.hpp"

namespace rcsim {

namespace {

std::vector<NormType> parse_norm_list(const std::string& key, const std::string& text) {
  std::vector<NormType> out;
  std::string t = text;
  std::replace(t.begin(), t.end(), ',', ' ');
  std::istringstream is(t);
  std::string tok;
  while (is >> tok) {
    const NormType n = parse_norm_type(key, tok);
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw UsageError("invalid value '" + text + "' for key '" + key + "': " + tok + " is listed twice");
    out.push_back(n);
  }
  if (out.empty())
    throw UsageError("invalid value '" + text + "' for key '" + key + "': expected a comma list of normalisations");
  return out;
}

}  // namespace

CommandSpec brody_map_command() {
  return {"brody-map",
          "fraction of unselectable keys over n and d (Brody et al. 2023), with and without normalisation",
          {
              {"map.count_min", "3", "smallest number of keys n >= 1"},
              {"map.count_max", "60", "largest number of keys n"},
              {"map.dim_min", "3", "smallest dimension d >= 2"},
              {"map.dim_max", "15", "largest dimension d"},
              {"map.draws", "100", "random key sets per cell, >= 1"},
              {"map.seed", std::to_string(kDefaultSeed), "seed (draw t of cell (n, d) = rcsim keys --keys.draw=t)"},
              {"map.norms", "none,layernorm",
               "comma list of normalisations (none | sphere | layernorm | projection | rmsnorm | dyt | derf)"},
              key_decl("norm.eps"),
              key_decl("norm.alpha"),
              {"keys.rtol", "1e-9", "relative tolerance of the floating-point decision"},
              {"keys.exact", "false", "re-check unselectable keys with GLPK's exact simplex (slow for norm none)"},
              {"map.threads", "1", "worker threads >= 0 over cells (0 = all cores); the map does not depend on it"},
              {"output.file", "data/brody_map.h5", "HDF5 output"},
          }};
}

int cmd_brody_map(std::map<std::string, std::string> v, const std::string& command_line, bool quiet,
                  const std::atomic<bool>* cancel) {
  BrodyMapSpec spec;
  spec.count_min = parse_int_value("map.count_min", v["map.count_min"], 1);
  spec.count_max = parse_int_value("map.count_max", v["map.count_max"], spec.count_min);
  spec.dim_min = parse_int_value("map.dim_min", v["map.dim_min"], 2);
  spec.dim_max = parse_int_value("map.dim_max", v["map.dim_max"], spec.dim_min);
  spec.draws = parse_int_value("map.draws", v["map.draws"], 1);
  spec.seed = parse_seed_value("map.seed", v["map.seed"]);
  spec.norms = parse_norm_list("map.norms", v["map.norms"]);
  spec.eps = parse_double_value("norm.eps", v["norm.eps"], 0.0, false);
  spec.alpha = make_config({{"norm.alpha", v["norm.alpha"]}}).norm.alpha;  // checked as rcsim run checks it
  spec.rtol = parse_double_value("keys.rtol", v["keys.rtol"], 0.0, false);
  spec.exact = parse_bool_value("keys.exact", v["keys.exact"]);
  spec.threads = parse_int_value("map.threads", v["map.threads"], 0);
  const std::string out = v["output.file"];
  if (out.empty()) throw UsageError("invalid value '' for key 'output.file': expected a file name");

  int last_pct = -1;
  const BrodyMap m = brody_map(spec, cancel, [&](int done, int total) {
    const int pct = 100 * done / total;
    if (!quiet && pct / 10 != last_pct / 10) spdlog::info("brody-map: {} of {} cells", done, total);
    last_pct = pct;
  });

  // Summary on stdout: per normalisation, the extremes of the two maps.
  std::cout << "brody-map: n = " << spec.count_min << ".." << spec.count_max << ", d = " << spec.dim_min << ".."
            << spec.dim_max << ", " << spec.draws << " draws per cell" << (spec.exact ? ", exact re-check" : "") << ", "
            << fmt(m.seconds, 3) << " s\n";
  for (std::size_t k = 0; k < spec.norms.size(); ++k) {
    const Matrix& U = m.unselectable_fraction[k];
    const Matrix& A = m.any_unselectable_fraction[k];
    std::cout << "  " << std::setw(10) << to_string(spec.norms[k]) << ": unselectable fraction mean "
              << fmt(U.mean(), 4) << ", max " << fmt(U.maxCoeff(), 4) << "; draws with >= 1 unselectable: mean "
              << fmt(A.mean(), 4) << ", max " << fmt(A.maxCoeff(), 4)
              << (spec.exact ? "; exact re-checks timed out: " + std::to_string(m.exact_unresolved[k]) : std::string())
              << "\n";
  }
  write_atomic(out, "rcsim-brody-map", command_line, [&](const h5::File& f) {
    f.set_attr("draws", spec.draws);
    f.set_attr("seed", std::to_string(spec.seed));
    f.set_attr("norm_eps", spec.eps);
    f.set_attr("rtol", spec.rtol);
    f.set_attr("exact", spec.exact ? 1 : 0);
    f.set_attr("elapsed_seconds", m.seconds);
    std::string names;
    for (auto nt : spec.norms) names += (names.empty() ? "" : ",") + to_string(nt);
    f.set_attr("norms", names);
    // Only where it acts (a map without dyt or derf is written as before).
    for (auto nt : spec.norms)
      if (nt == NormType::dyt || nt == NormType::derf) {
        f.set_attr("norm_alpha", spec.alpha);
        break;
      }
    std::vector<std::int64_t> counts(m.counts.begin(), m.counts.end()), dims(m.dims.begin(), m.dims.end());
    // The coordinates, at the root and in each group (xarray.open_dataset(file, group=...)).
    auto coordinates = [&](const h5::Group& g) {
      g.write_coordinate("count", counts, "number of keys n");
      g.write_coordinate("dim", dims, "key dimension d");
    };
    coordinates(f);
    for (std::size_t k = 0; k < spec.norms.size(); ++k) {
      const h5::Group g = f.create_group(to_string(spec.norms[k]));
      coordinates(g);
      auto put = [&](const std::string& name, const Matrix& M, const std::string& long_name) {
        const h5::Dataset d = write_matrix(g, name, M);
        describe(d, long_name);
        g.label_axes(d, {"dim", "count"});
      };
      put("unselectable_fraction", m.unselectable_fraction[k], "mean over draws of the fraction of unselectable keys");
      put("any_unselectable_fraction", m.any_unselectable_fraction[k],
          "fraction of draws with at least one unselectable key");
      put("max_unselectable", m.max_unselectable[k], "largest number of unselectable keys in one draw");
      g.set_attr("exact_unresolved", static_cast<std::int64_t>(m.exact_unresolved[k]));
    }
  });
  spdlog::info("wrote {}", out);
  return 0;
}

}  // namespace rcsim
