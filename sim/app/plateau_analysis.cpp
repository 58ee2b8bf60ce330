#include "app/plateau_analysis.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {

std::string fmt(double x, const char* f = "%.6g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// The length of a 1-D coordinate of the file, 0 when it has none.
std::size_t coordinate_length(const h5::File& f, const std::string& name) {
  if (!f.exists(name)) return 0;
  const std::vector<hsize_t> shape = f.open_dataset(name).shape();
  return shape.size() == 1 ? static_cast<std::size_t>(shape[0]) : 0;
}

// The measures of /metrics that are a series [trial, layer] or [trial, attention_layer].
std::vector<std::string> series_names(const h5::File& f, std::size_t layers, std::size_t attention_layers) {
  std::vector<std::string> out;
  if (!f.exists("metrics")) return out;
  const h5::Group metrics = f.open_group("metrics");
  for (const std::string& name : metrics.members()) {
    if (name == "layer" || name == "attention_layer" || name == "trial") continue;
    const std::vector<hsize_t> shape = metrics.open_dataset(name).shape();
    if (shape.size() == 2 && shape[0] > 0 && (shape[1] == layers || shape[1] == attention_layers) && shape[1] > 0)
      out.push_back(name);
  }
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

}  // namespace

void validate(const PlateauOptions& o) {
  if (!(std::isfinite(o.rtol) && o.rtol >= 0))
    throw UsageError("--plateau-rtol=" + fmt(o.rtol) + ": expected a finite number >= 0 (a fraction of the series' range)");
  if (o.min_duration && !(std::isfinite(*o.min_duration) && *o.min_duration >= 0))
    throw UsageError("--plateau-min-duration=" + fmt(*o.min_duration) + ": expected auto or a finite number >= 0");
}

PlateauAnalysis analyze_plateaus(const h5::File& f, const std::string& path, const PlateauOptions& o) {
  validate(o);
  const std::size_t layers = coordinate_length(f, "layer"), attention_layers = coordinate_length(f, "attention_layer");
  const std::vector<std::string> names = series_names(f, layers, attention_layers);
  if (std::find(names.begin(), names.end(), o.measure) == names.end())
    throw UsageError("--plateaus=" + printable(o.measure) + ": not a series of run file '" + path +
                     "' (allowed: none, or a measure it holds per trial and layer: " + joined(names) + ")");
  const h5::Array y = f.read("metrics/" + o.measure);
  const std::size_t trials = y.shape[0], n = y.shape[1];
  PlateauAnalysis p;
  p.measure = o.measure;
  p.options = o;
  // As metastability.py: /time where it has one value per sample (a particle-flow run's measures
  // on /layer), else the measure's own layer axis.
  p.axis = n == layers ? "layer" : "attention_layer";
  if (coordinate_length(f, "time") == n) p.axis = "time";
  p.t = f.read(p.axis).data;
  for (double x : p.t)
    if (!std::isfinite(x)) throw UsageError("run file '" + path + "': /" + p.axis + " holds " + fmt(x) + ", expected finite values");
  if (!std::is_sorted(p.t.begin(), p.t.end()))
    throw UsageError("run file '" + path + "': /" + p.axis +
                     " is not non-decreasing; the plateaus need an ordered axis");
  p.min_duration = o.min_duration ? *o.min_duration : default_min_duration(p.t);
  for (std::size_t i = 0; i < trials; ++i) {
    std::vector<double> yi(y.data.begin() + static_cast<long>(i * n), y.data.begin() + static_cast<long>((i + 1) * n));
    TrialPlateaus r;
    while (r.finite_samples < n && std::isfinite(yi[r.finite_samples])) ++r.finite_samples;
    if (r.finite_samples < n)
      p.warnings.push_back(path + ": " + o.measure + " of trial " + std::to_string(i) + " is not finite from sample " +
                           std::to_string(r.finite_samples) + " (" + p.axis + " " + fmt(p.t[r.finite_samples]) +
                           ") on: plateaus of the samples before it only");
    yi.resize(r.finite_samples);
    const std::vector<double> ti(p.t.begin(), p.t.begin() + static_cast<long>(r.finite_samples));
    if (!yi.empty()) {
      r.plateaus = find_plateaus(ti, yi, o.rtol, p.min_duration);
      r.merges = merge_times(ti, yi, r.plateaus);
    }
    p.trial.push_back(std::move(r));
  }
  return p;
}

void write_plateaus(const h5::Group& analysis, const PlateauAnalysis& p) {
  const h5::Group g = analysis.create_group("plateaus");
  g.set_attr("measure", p.measure);
  g.set_attr("axis", p.axis);
  g.set_attr("rtol", p.options.rtol);
  g.set_attr("min_duration", p.min_duration);
  g.set_attr("min_duration_source",
             p.options.min_duration ? std::string("given") : std::string("auto: 0.02 x the axis' span"));
  g.set_attr("definition",
             "tol = rtol x (range of the series), D = min_duration; flat sample: the means of the series over "
             "[t - D/2, t] and [t, t + D/2] differ by <= tol; a plateau: a maximal run of flat samples, trimmed to "
             "and extended over the samples within tol of its mean, >= 2 samples lasting >= D; consecutive plateaus "
             "within tol of each other joined; merge time: where the series first crosses the midpoint of two "
             "consecutive plateaus' values (linear interpolation); a series is cut at its first non-finite value "
             "(analysis/metastability.py, docs/user/analysis.md)");
  std::vector<std::int64_t> trial_index, plateau_index, merge_index, plateau_trial, merge_trial, first, last, finite, count;
  std::vector<double> start, end, value, merge_time;
  for (std::size_t i = 0; i < p.trial.size(); ++i) {
    const TrialPlateaus& r = p.trial[i];
    trial_index.push_back(static_cast<std::int64_t>(i));
    finite.push_back(static_cast<std::int64_t>(r.finite_samples));
    count.push_back(static_cast<std::int64_t>(r.plateaus.size()));
    for (const Plateau& q : r.plateaus) {
      plateau_index.push_back(static_cast<std::int64_t>(plateau_index.size()));
      plateau_trial.push_back(static_cast<std::int64_t>(i));
      start.push_back(q.start);
      end.push_back(q.end);
      value.push_back(q.value);
      first.push_back(static_cast<std::int64_t>(q.first));
      last.push_back(static_cast<std::int64_t>(q.last));
    }
    for (double m : r.merges) {
      merge_index.push_back(static_cast<std::int64_t>(merge_index.size()));
      merge_trial.push_back(static_cast<std::int64_t>(i));
      merge_time.push_back(m);
    }
  }
  g.write_coordinate("trial", trial_index, "trial index");
  g.write_coordinate("plateau", plateau_index, "plateau index (all trials, in trial then time order)");
  g.write_coordinate("merge", merge_index, "merge index (all trials, in trial then time order)");
  const auto put = [&](const std::string& name, const std::string& dim, const auto& v, const std::string& long_name) {
    const h5::Dataset ds = g.write(name, {static_cast<hsize_t>(v.size())}, v.data());
    ds.set_attr("long_name", long_name);
    g.label_axes(ds, {dim});
  };
  put("finite_samples", "trial", finite, "samples of the series used (up to its first non-finite value)");
  put("plateau_count", "trial", count, "plateaus found");
  put("plateau_trial", "plateau", plateau_trial, "trial of the plateau");
  put("start", "plateau", start, "first " + p.axis + " of the plateau");
  put("end", "plateau", end, "last " + p.axis + " of the plateau");
  put("value", "plateau", value, "plateau value of " + p.measure + " (mean of its samples)");
  put("first_sample", "plateau", first, "index of the plateau's first sample on /" + p.axis);
  put("last_sample", "plateau", last, "index of the plateau's last sample on /" + p.axis);
  put("merge_trial", "merge", merge_trial, "trial of the merge");
  put("merge_time", "merge", merge_time, p.axis + " where " + p.measure + " crosses the midpoint of two plateaus");
}

std::string plateau_table(const PlateauAnalysis& p) {
  std::ostringstream os;
  os << "  plateaus of " << p.measure << " against " << p.axis << " (rtol " << fmt(p.options.rtol) << ", min duration "
     << fmt(p.min_duration) << (p.options.min_duration ? "" : " (auto)") << "):\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %5s %7s %14s %14s %14s %17s\n", "trial", "plateau", "start", "end", "duration",
                "value");
  os << line;
  for (std::size_t i = 0; i < p.trial.size(); ++i) {
    const TrialPlateaus& r = p.trial[i];
    for (std::size_t k = 0; k < r.plateaus.size(); ++k) {
      const Plateau& q = r.plateaus[k];
      std::snprintf(line, sizeof line, "  %5zu %7zu %14s %14s %14s %17s\n", i, k, fmt(q.start).c_str(),
                    fmt(q.end).c_str(), fmt(q.end - q.start).c_str(), fmt(q.value, "%.9g").c_str());
      os << line;
    }
  }
  for (std::size_t i = 0; i < p.trial.size(); ++i) {
    os << "  merge times of trial " << i << ":";
    for (double m : p.trial[i].merges) os << " " << fmt(m);
    os << (p.trial[i].merges.empty() ? " none\n" : "\n");
  }
  return os.str();
}

}  // namespace rcsim
