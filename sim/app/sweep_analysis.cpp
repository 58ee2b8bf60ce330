#include "app/sweep_analysis.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "io/output_file.hpp"
#include "kernel/support/version.hpp"
#include "io/hdf5_file.hpp"
#include "io/run_file.hpp"

namespace fs = std::filesystem;

namespace rcsim {

namespace {

// The numeric columns: name, long name, value of a row.
struct NumericColumn {
  const char* name;
  const char* long_name;
  double (*value)(const RunAnalysis&);
};

const std::vector<NumericColumn>& numeric_columns() {
  static const std::vector<NumericColumn> columns = {
      {"mu_rate", "ensemble decay rate of mu per layer (fit of the median curve)",
       [](const RunAnalysis& a) { return -a.mu.ensemble.slope; }},
      {"mu_rate_stderr", "standard error of mu_rate", [](const RunAnalysis& a) { return a.mu.ensemble.slope_stderr; }},
      {"mu_r2", "R^2 of the ensemble fit of ln mu", [](const RunAnalysis& a) { return a.mu.ensemble.r2; }},
      {"mu_window_first", "first layer of the ensemble fit window",
       [](const RunAnalysis& a) { return a.mu.ensemble.points ? a.mu.ensemble.first_layer : NAN; }},
      {"mu_window_last", "last layer of the ensemble fit window",
       [](const RunAnalysis& a) { return a.mu.ensemble.points ? a.mu.ensemble.last_layer : NAN; }},
      {"mu_first_half_rate", "decay rate on the first half of the window",
       [](const RunAnalysis& a) { return a.mu.ensemble_quality.first_half_rate; }},
      {"mu_second_half_rate", "decay rate on the second half of the window",
       [](const RunAnalysis& a) { return a.mu.ensemble_quality.second_half_rate; }},
      {"mu_poor_fit", "1 if the ensemble fit is poor (R^2 < 0.95 or halves differ by > 30%)",
       [](const RunAnalysis& a) { return a.mu.ensemble_quality.poor ? 1.0 : 0.0; }},
      {"mu_rate_median", "median of the per-trial decay rates of mu", [](const RunAnalysis& a) { return a.mu.median; }},
      {"mu_rate_q10", "10% quantile of the per-trial rates", [](const RunAnalysis& a) { return a.mu.q10; }},
      {"mu_rate_q90", "90% quantile of the per-trial rates", [](const RunAnalysis& a) { return a.mu.q90; }},
      {"trials_fitted", "trials with a fitted rate of mu", [](const RunAnalysis& a) { return double(a.mu.fitted); }},
      {"r1_rate", "ensemble decay rate of rank_one_residual per layer",
       [](const RunAnalysis& a) { return -a.rank_one_residual.ensemble.slope; }},
      {"r1_r2", "R^2 of the ensemble fit of ln rank_one_residual",
       [](const RunAnalysis& a) { return a.rank_one_residual.ensemble.r2; }},
      {"collapse_depth_median", "median over collapsed trials of the first layer with mu_rel < threshold",
       [](const RunAnalysis& a) { return a.collapse_depth_median; }},
      {"collapsed_fraction", "fraction of trials with mu_rel < threshold somewhere",
       [](const RunAnalysis& a) { return a.collapsed_fraction; }},
      {"radius", "mask radius r (-1: not quasi-strongly connected)", [](const RunAnalysis& a) { return double(a.radius); }},
      {"eps", "smallest attention weight seen", [](const RunAnalysis& a) { return a.eps; }},
      {"log10_bound_rate", "log10 of the bound's rate -ln(1 - eps^r)/r", [](const RunAnalysis& a) { return a.log10_bound_rate; }},
      {"log10_rate_ratio", "log10 of mu_rate / bound rate", [](const RunAnalysis& a) { return a.log10_rate_ratio; }},
  };
  return columns;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);  // round-trips exactly
  return buf;
}

}  // namespace

std::vector<std::string> sweep_table_columns(const SweepIndex& index) {
  std::vector<std::string> out = {"point", "name", "file"};
  out.insert(out.end(), index.keys.begin(), index.keys.end());
  for (const NumericColumn& c : numeric_columns()) out.push_back(c.name);
  return out;
}

std::string sweep_summary_table(const SweepIndex& index, const std::vector<SweepAnalysisRow>& rows,
                                const AnalysisOptions& o) {
  std::ostringstream os;
  os << "sweep " << index.directory << ": " << rows.size() << " of " << index.points.size()
     << " points analysed; window: " << (o.window == AnalysisOptions::Window::automatic ? "auto"
                                        : o.window == AnalysisOptions::Window::fixed  ? "fixed"
                                                                                      : "layers")
     << "; collapse threshold " << number(o.threshold) << "\n";
  std::size_t width = 5;
  for (const SweepAnalysisRow& r : rows) width = std::max(width, r.entry->name.size());
  char line[512];
  std::snprintf(line, sizeof line, "  %-*s %10s %7s %-11s %10s %12s %14s\n", static_cast<int>(width), "point",
                "mu rate", "R^2", "window", "r1 rate", "depth (med)", "log10(ratio)");
  os << line;
  for (const SweepAnalysisRow& r : rows) {
    const RunAnalysis& a = r.analysis;
    char win[64] = "-";
    if (a.mu.ensemble.points) std::snprintf(win, sizeof win, "%.0f..%.0f", a.mu.ensemble.first_layer, a.mu.ensemble.last_layer);
    char depth[32] = "never";
    if (a.collapsed_fraction > 0) std::snprintf(depth, sizeof depth, "%.4g", a.collapse_depth_median);
    std::snprintf(line, sizeof line, "  %-*s %10.4g %7.4f %-11s %10.4g %12s %14.4g%s\n", static_cast<int>(width),
                  r.entry->name.c_str(), -a.mu.ensemble.slope, a.mu.ensemble.r2, win, -a.rank_one_residual.ensemble.slope,
                  depth, a.log10_rate_ratio, a.mu.ensemble_quality.poor ? "  (poor fit)" : "");
    os << line;
  }
  return os.str();
}

std::vector<std::string> write_sweep_table(const SweepIndex& index, const std::vector<SweepAnalysisRow>& rows,
                                           const AnalysisOptions& o) {
  const std::string csv_path = (fs::path(index.directory) / "analysis.csv").string();
  const std::string h5_path = (fs::path(index.directory) / "analysis.h5").string();
  // The table's lock covers both files.
  OutputFile h5(h5_path, {"", "sweep table '" + h5_path + "'", {csv_path}});

  std::ostringstream csv;
  const std::vector<std::string> columns = sweep_table_columns(index);
  for (std::size_t i = 0; i < columns.size(); ++i) csv << (i ? "," : "") << csv_field(columns[i]);
  csv << "\n";
  for (const SweepAnalysisRow& r : rows) {
    csv << r.point << "," << csv_field(r.entry->name) << "," << csv_field(fs::path(r.entry->file).filename().string());
    for (const std::string& v : r.entry->values) csv << "," << csv_field(v);
    for (const NumericColumn& c : numeric_columns()) csv << "," << number(c.value(r.analysis));
    csv << "\n";
  }
  OutputFile(csv_path, {}).write_bytes(csv.str());

  h5.write_hdf5({"rcsim-sweep-analysis", 1}, [&](const h5::File& f) {
    f.set_attr("window", window_rule(o));
    f.set_attr("threshold", o.threshold);
    f.set_attr("index", "index.h5");
    std::vector<std::int64_t> ids;
    std::vector<std::string> names, files;
    for (const SweepAnalysisRow& r : rows) {
      ids.push_back(r.point);
      names.push_back(r.entry->name);
      files.push_back(fs::path(r.entry->file).filename().string());
    }
    f.write_coordinate("point", ids, "point index in the sweep (index.h5), analysed points only");
    auto text_column = [&](const std::string& name, const std::vector<std::string>& v, const std::string& long_name) {
      const h5::Dataset ds = f.write_strings(name, v);
      ds.set_attr("long_name", long_name);
      f.label_axes(ds, {"point"});
    };
    text_column("name", names, "point name (the swept key=value pairs)");
    text_column("file", files, "run file of the point, relative to this directory");
    for (std::size_t k = 0; k < index.keys.size(); ++k) {
      std::vector<std::string> v;
      for (const SweepAnalysisRow& r : rows) v.push_back(r.entry->values.at(k));
      text_column(index.keys[k], v, "value of configuration key " + index.keys[k] + " (as text)");
    }
    for (const NumericColumn& c : numeric_columns()) {
      std::vector<double> v;
      for (const SweepAnalysisRow& r : rows) v.push_back(c.value(r.analysis));
      const h5::Dataset ds = f.write(c.name, {v.size()}, v.data());
      ds.set_attr("long_name", c.long_name);
      f.label_axes(ds, {"point"});
    }
  });
  return {csv_path, h5_path};
}

}  // namespace rcsim
