#include "app/analysis.hpp"
#include "io/provenance.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>

#include "kernel/support/errors.hpp"
#include "io/output_file.hpp"
#include "io/hdf5_file.hpp"
#include "io/run_file.hpp"
#include "kernel/measures/summary.hpp"
#include "kernel/support/version.hpp"

namespace fs = std::filesystem;

namespace rcsim {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Row `i` of a [trial, layer] array read from the file.
std::vector<double> row(const h5::Array& a, std::size_t i) {
  const std::size_t n = a.shape[1];
  return std::vector<double>(a.data.begin() + static_cast<long>(i * n),
                             a.data.begin() + static_cast<long>((i + 1) * n));
}

h5::Array read_measure(const h5::File& f, const std::string& name, std::size_t trials, std::size_t layers) {
  h5::Array a = f.read("metrics/" + name);
  if (a.shape.size() != 2 || a.shape[0] != trials || (layers && a.shape[1] != layers))
    throw UsageError(f.filename() + ": /metrics/" + name + " has shape " + h5::shape_string(a.shape) + ", expected [" +
                     std::to_string(trials) + ", " + (layers ? std::to_string(layers) : std::string("any")) +
                     "] (trials x /layer)");
  return a;
}

ExponentialPhase window_for(const AnalysisOptions& o, const std::vector<double>& t, const std::vector<double>& y,
                            const std::vector<double>& rel) {
  switch (o.window) {
    case AnalysisOptions::Window::layers: return {layer_window(t, y, o.from, o.to), false};
    case AnalysisOptions::Window::fixed: return {default_window(t, y, rel), false};
    case AnalysisOptions::Window::automatic: break;
  }
  return exponential_window(t, y, rel);
}

CurveRates curve_rates(const std::string& name, const std::vector<double>& t, const h5::Array& y, const h5::Array& rel,
                       const AnalysisOptions& o) {
  CurveRates c;
  c.measure = name;
  const std::size_t T = y.shape[0], n = y.shape[1];
  std::vector<double> rates;
  for (std::size_t i = 0; i < T; ++i) {
    const auto yi = row(y, i), ri = row(rel, i);
    const ExponentialPhase w = window_for(o, t, yi, ri);
    c.trial.push_back(fit_log_linear(t, yi, w.window.first, w.window.last));
    c.trial_quality.push_back(fit_quality(t, yi, c.trial.back(), w.window));
    c.trial_phase_found.push_back(w.found ? 1 : 0);
    if (c.trial.back().ok()) {
      rates.push_back(-c.trial.back().slope);
      c.poor_fits += c.trial_quality.back().poor;
    }
  }
  // The ensemble curve: per layer, the median over trials of y (and of rel, for the window).
  std::vector<double> med_rel(n);
  c.median_curve.resize(n);
  for (std::size_t j = 0; j < n; ++j) {
    std::vector<double> col(T), colr(T);
    for (std::size_t i = 0; i < T; ++i) {
      col[i] = y.data[i * n + j];
      colr[i] = rel.data[i * n + j];
    }
    c.median_curve[j] = quantile(col, 0.5);
    med_rel[j] = quantile(colr, 0.5);
  }
  const ExponentialPhase w = window_for(o, t, c.median_curve, med_rel);
  c.ensemble = fit_log_linear(t, c.median_curve, w.window.first, w.window.last);
  c.ensemble_quality = fit_quality(t, c.median_curve, c.ensemble, w.window);
  c.ensemble_phase_found = w.found;
  c.ensemble_last_usable = last_usable_index(c.median_curve, med_rel);
  c.fitted = static_cast<int>(rates.size());
  if (rates.empty()) {
    c.mean = c.std = c.sem = c.median = c.q10 = c.q90 = kNaN;
    return c;
  }
  double sum = 0;
  for (double r : rates) sum += r;
  c.mean = sum / c.fitted;
  double ss = 0;
  for (double r : rates) ss += (r - c.mean) * (r - c.mean);
  c.std = c.fitted > 1 ? std::sqrt(ss / (c.fitted - 1)) : kNaN;
  c.sem = c.fitted > 1 ? c.std / std::sqrt(static_cast<double>(c.fitted)) : kNaN;
  c.median = quantile(rates, 0.5);
  c.q10 = quantile(rates, 0.1);
  c.q90 = quantile(rates, 0.9);
  return c;
}

std::string fmt(double x, const char* f = "%.4g") {
  if (std::isnan(x)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

}  // namespace

void validate(const AnalysisOptions& o) {
  if (!(o.threshold > 0.0 && o.threshold < 1.0))
    throw UsageError("--threshold=" + fmt(o.threshold) + ": must lie in (0, 1) (mu_rel = mu / ||X||_F is at most 1)");
  if (o.window == AnalysisOptions::Window::layers && !(std::isfinite(o.from) && std::isfinite(o.to) && o.from < o.to))
    throw UsageError("--window=" + fmt(o.from) + ":" + fmt(o.to) + ": expected FROM:TO layers with FROM < TO");
  validate(o.plateaus);
}

std::string window_rule(const AnalysisOptions& o) {
  if (o.window == AnalysisOptions::Window::layers)
    return "layers " + fmt(o.from) + " to " + fmt(o.to) + ", cut at the first zero or non-finite value";
  if (o.window == AnalysisOptions::Window::automatic)
    return "auto: the stretch (>= " + std::to_string(kAutoMinPoints) + " recorded layers) where ln y is a "
           "straight line (decaying, R^2 >= " + fmt(kAutoMinR2) + ", the halves' slopes within " +
           fmt(100 * kAutoHalvesTolerance) + "% or their noise) that covers the most decay (e-folds), before the first "
           "layer where the curve is non-finite, <= DBL_MIN, or its relative value < 1e-13; where there is none, the "
           "fixed rule";
  return "fixed: stop before the first layer where the curve is non-finite, <= DBL_MIN, or its relative value "
         "(mu_rel for mu) < 1e-13; skip the first 10% (at least 1 layer) of the usable depth";
}

RunAnalysis analyze_run(const std::string& path, const AnalysisOptions& o) {
  validate(o);
  const h5::File f = h5::File::open_read(path, "run file");
  if (!f.has_attr("filetype") || f.attr_string("filetype") != "rcsim-run")
    throw UsageError("run file '" + path + "': not an rcsim run file (root attribute filetype != \"rcsim-run\")");
  if (!f.has_attr("complete") || f.attr_int("complete") != 1)
    throw UsageError("run file '" + path + "': incomplete (attribute complete != 1)");
  RunAnalysis a;
  a.path = path;
  a.mask_type = f.attr_string("mask_type");
  a.norm_type = f.attr_string("norm_type");
  a.tokens = static_cast<int>(f.attr_int("tokens"));
  a.dim = static_cast<int>(f.attr_int("dim"));
  const h5::Array layer = f.read("layer");
  a.layer = layer.data;
  // A damaged or hand-made file: the recorded layers must be a non-empty list of whole numbers
  // (they become int64 coordinates and index every curve).
  if (layer.shape.size() != 1 || layer.data.empty())
    throw UsageError("run file '" + path + "': /layer has shape " + h5::shape_string(layer.shape) +
                     ", expected a non-empty list of layers");
  for (double t : a.layer)
    if (!(t >= 0 && t <= 9.0e15 && t == std::floor(t)))
      throw UsageError("run file '" + path + "': /layer holds " + fmt(t) + ", expected whole layer numbers >= 0");
  // Every curve is fitted and reported against /layer, in order: a layer that does not follow the
  // one before it (a hand-edited or reversed axis) would turn each rate's sign or window.
  for (std::size_t j = 1; j < a.layer.size(); ++j)
    if (!(a.layer[j] > a.layer[j - 1]))
      throw UsageError("run file '" + path + "': /layer holds " + fmt(a.layer[j]) + " after " + fmt(a.layer[j - 1]) +
                       " (position " + std::to_string(j) + "), expected strictly increasing layer numbers");
  if (o.plateaus.enabled()) a.plateaus = analyze_plateaus(f, path, o.plateaus);
  const h5::Array mu = f.read("metrics/mu");
  if (mu.shape.size() != 2 || mu.shape[0] == 0 || mu.shape[1] != a.layer.size())
    throw UsageError("run file '" + path + "': /metrics/mu has shape " + h5::shape_string(mu.shape) + ", expected [" +
                     "trials >= 1, " + std::to_string(a.layer.size()) + "] (trials x /layer)");
  const std::size_t T = mu.shape[0], n = a.layer.size();
  a.trials = static_cast<int>(T);
  const h5::Array mu_checked = read_measure(f, "mu", T, n);
  const h5::Array mu_rel = read_measure(f, "mu_rel", T, n);
  const h5::Array r1 = read_measure(f, "rank_one_residual", T, n);
  const h5::Array attn_min = read_measure(f, "attn_min", T, 0);

  a.mu = curve_rates("mu", a.layer, mu_checked, mu_rel, o);
  a.rank_one_residual = curve_rates("rank_one_residual", a.layer, r1, r1, o);

  std::vector<double> depths;
  for (std::size_t i = 0; i < T; ++i) {
    a.collapse_depth.push_back(collapse_depth(a.layer, row(mu_rel, i), o.threshold));
    if (a.collapse_depth.back() >= 0) depths.push_back(a.collapse_depth.back());
  }
  a.collapsed_fraction = static_cast<double>(depths.size()) / static_cast<double>(T);
  a.collapse_depth_median = quantile(depths, 0.5);

  const h5::Dataset mask = f.open_dataset("mask");
  a.radius = static_cast<int>(mask.attr_int("radius"));
  a.eps = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < T; ++i) {
    double e = std::numeric_limits<double>::infinity();
    for (double x : row(attn_min, i))
      if (std::isfinite(x)) e = std::min(e, x);
    a.eps_trial.push_back(std::isfinite(e) ? e : kNaN);
    a.eps = std::min(a.eps, e);
    a.C.push_back(mu.data[i * n]);
  }
  if (!std::isfinite(a.eps)) a.eps = kNaN;
  a.bound_rate = bound_rate(a.eps, a.radius);
  a.rate_ratio = -a.mu.ensemble.slope / a.bound_rate;
  a.log10_bound_rate = log10_bound_rate(a.eps, a.radius);
  a.log10_rate_ratio = std::log10(-a.mu.ensemble.slope) - a.log10_bound_rate;
  return a;
}

namespace {

// The coordinates each group of /analysis carries (xarray.open_dataset(file, group=...)).
struct AnalysisAxes {
  std::vector<std::int64_t> trial, layer;
  hsize_t trials() const { return trial.size(); }
  hsize_t layers() const { return layer.size(); }
  void write(const h5::Group& g) const {
    g.write_coordinate("trial", trial, "trial index");
    g.write_coordinate("layer", layer, "layer t (0 = the input X(0)) of each recorded column");
  }
};

void write_per_trial(const h5::Group& g, const AnalysisAxes& axes, const std::string& name, const std::vector<double>& v,
                     const std::string& long_name, const std::string& units) {
  const h5::Dataset ds = g.write(name, {axes.trials()}, v.data());
  ds.set_attr("long_name", long_name);
  ds.set_attr("units", units);
  g.label_axes(ds, {"trial"});
}

// /analysis/<measure>: the per-trial fits, the median curve and the ensemble fit of one measure.
void write_curve_rates(const h5::Group& g, const AnalysisAxes& axes, const CurveRates& c) {
  const h5::Group cg = g.create_group(c.measure);
  axes.write(cg);
  std::vector<double> rate, err, r2, first, last, points, half1, half2, found;
  for (std::size_t i = 0; i < c.trial.size(); ++i) {
    half1.push_back(c.trial_quality[i].first_half_rate);
    half2.push_back(c.trial_quality[i].second_half_rate);
    found.push_back(c.trial_phase_found[i]);
  }
  for (const LogLinearFit& fit : c.trial) {
    rate.push_back(-fit.slope);
    err.push_back(fit.slope_stderr);
    r2.push_back(fit.r2);
    first.push_back(fit.points ? fit.first_layer : kNaN);
    last.push_back(fit.points ? fit.last_layer : kNaN);
    points.push_back(fit.points);
  }
  const std::string what = c.measure;
  write_per_trial(cg, axes, "decay_rate", rate, "decay rate of ln " + what + " per layer (-slope of the fit)", "1/layer");
  write_per_trial(cg, axes, "decay_rate_stderr", err, "standard error of the fitted slope", "1/layer");
  write_per_trial(cg, axes, "r2", r2, "coefficient of determination of the fit", "1");
  write_per_trial(cg, axes, "window_first", first, "first layer of the fit window", "layer");
  write_per_trial(cg, axes, "window_last", last, "last layer of the fit window", "layer");
  write_per_trial(cg, axes, "window_points", points, "recorded layers in the fit window", "1");
  write_per_trial(cg, axes, "first_half_rate", half1, "decay rate fitted on the first half of the window", "1/layer");
  write_per_trial(cg, axes, "second_half_rate", half2, "decay rate fitted on the second half of the window", "1/layer");
  write_per_trial(cg, axes, "phase_found", found, "1: the auto window found an exponential phase (0: fixed rule used)", "1");
  const h5::Dataset med = cg.write("median_curve", {axes.layers()}, c.median_curve.data());
  med.set_attr("long_name", "median over trials of " + what);
  cg.label_axes(med, {"layer"});
  cg.set_attr("ensemble_decay_rate", -c.ensemble.slope);
  cg.set_attr("ensemble_decay_rate_stderr", c.ensemble.slope_stderr);
  cg.set_attr("ensemble_window_first", c.ensemble.points ? c.ensemble.first_layer : kNaN);
  cg.set_attr("ensemble_window_last", c.ensemble.points ? c.ensemble.last_layer : kNaN);
  cg.set_attr("trials_fitted", c.fitted);
  cg.set_attr("ensemble_r2", c.ensemble.r2);
  cg.set_attr("ensemble_first_half_rate", c.ensemble_quality.first_half_rate);
  cg.set_attr("ensemble_second_half_rate", c.ensemble_quality.second_half_rate);
  cg.set_attr("ensemble_phase_found", c.ensemble_phase_found ? 1 : 0);
  cg.set_attr("ensemble_fit_warning", c.ensemble_quality.reason);
  cg.set_attr("trials_poor_fit", c.poor_fits);
  cg.set_attr("decay_rate_mean", c.mean);
  cg.set_attr("decay_rate_std", c.std);
  cg.set_attr("decay_rate_sem", c.sem);
  cg.set_attr("decay_rate_median", c.median);
  cg.set_attr("decay_rate_q10", c.q10);
  cg.set_attr("decay_rate_q90", c.q90);
}

// /analysis/theory: the collapse bound C (1 - eps^r)^(t/r) per trial and at the median C.
void write_theory(const h5::Group& g, const AnalysisAxes& axes, const RunAnalysis& a) {
  const h5::Group th = g.create_group("theory");
  axes.write(th);
  th.set_attr("radius", a.radius);
  th.set_attr("eps", a.eps);
  th.set_attr("bound_rate", a.bound_rate);
  th.set_attr("rate_ratio", a.rate_ratio);
  th.set_attr("log10_bound_rate", a.log10_bound_rate);
  th.set_attr("log10_rate_ratio", a.log10_rate_ratio);
  th.set_attr("formula", "bound = C (1 - eps^r)^(t/r), C = mu at the first recorded layer (per trial)");
  write_per_trial(th, axes, "eps", a.eps_trial, "smallest attention weight seen in the trial", "1");
  write_per_trial(th, axes, "C", a.C, "mu at the first recorded layer", "same as X");
  const auto T = axes.trials(), n = axes.layers();
  std::vector<double> bound(T * n), median_bound(n);
  for (std::size_t i = 0; i < T; ++i)
    for (std::size_t j = 0; j < n; ++j) bound[i * n + j] = theory_bound(a.C[i], a.eps, a.radius, a.layer[j]);
  const double C_med = quantile(a.C, 0.5);
  for (std::size_t j = 0; j < n; ++j) median_bound[j] = theory_bound(C_med, a.eps, a.radius, a.layer[j]);
  const h5::Dataset b = th.write("bound", {T, n}, bound.data());
  b.set_attr("long_name", "reported bound C (1 - eps^r)^(t/r) with the run's smallest eps");
  th.label_axes(b, {"trial", "layer"});
  const h5::Dataset bm = th.write("bound_median", {n}, median_bound.data());
  bm.set_attr("long_name", "the bound with C = median over trials of mu at the first layer");
  th.label_axes(bm, {"layer"});
}

void write_analysis_group(const h5::Group& g, const RunAnalysis& a, const AnalysisOptions& o) {
  write_provenance(g);
  if (a.plateaus.enabled()) write_plateaus(g, a.plateaus);
  g.set_attr("window", window_rule(o));
  g.set_attr("window_mode", o.window == AnalysisOptions::Window::automatic ? "auto"
                            : o.window == AnalysisOptions::Window::fixed  ? "fixed"
                                                                          : "layers");
  g.set_attr("threshold", o.threshold);
  AnalysisAxes axes;
  for (int i = 0; i < a.trials; ++i) axes.trial.push_back(i);
  for (double t : a.layer) axes.layer.push_back(static_cast<std::int64_t>(t));
  axes.write(g);
  for (const CurveRates* c : {&a.mu, &a.rank_one_residual}) write_curve_rates(g, axes, *c);
  write_per_trial(g, axes, "collapse_depth", a.collapse_depth, "first layer with mu_rel < threshold (-1 = never)", "layer");
  g.set_attr("collapse_depth_median", a.collapse_depth_median);
  g.set_attr("collapsed_fraction", a.collapsed_fraction);
  write_theory(g, axes, a);
}

}  // namespace

void write_analysis(const RunAnalysis& a, const AnalysisOptions& o) {
  // A new file (an exclusive temporary beside the run file: the run file with /analysis made
  // anew), written and checked, then renamed over the run file: the run file is never edited in
  // place, and nothing of it but /analysis is touched.
  OutputFile file(a.path, {"", "run file '" + a.path + "'"});
  file.update_hdf5("analysis", [&](const h5::Group& g) { write_analysis_group(g, a, o); },
                   "writing /analysis into '" + a.path + "'");
}

// One line per measure whose rate is doubtful, with every reason in it (a default run's complete
// mask collapses to zero within a few layers: no exponential phase, and a poor fit on the few
// layers before zero; said once, not as three warnings).
std::vector<std::string> fit_warnings(const RunAnalysis& a, const AnalysisOptions& o) {
  std::vector<std::string> out = a.plateaus.warnings;
  const auto layer = [&](double t) { return fmt(t, "%.0f"); };
  for (const CurveRates* c : {&a.mu, &a.rank_one_residual}) {
    const bool no_phase = o.window == AnalysisOptions::Window::automatic && !c->ensemble_phase_found && c->ensemble.ok();
    const bool most_trials_poor = c->poor_fits * 2 > c->fitted;  // one noisy trial is not worth a warning
    if (!no_phase && !c->ensemble_quality.poor && !most_trials_poor) continue;
    const std::string win =
        c->ensemble.points ? "layers " + layer(c->ensemble.first_layer) + ".." + layer(c->ensemble.last_layer) : "";
    std::string why;
    if (no_phase) {
      const int usable = c->ensemble_last_usable + 1;
      why = usable >= 1 && usable < kAutoMinPoints
                ? "no exponential phase (the median is usable on layers " + layer(a.layer[0]) + ".." +
                      layer(a.layer[static_cast<std::size_t>(usable - 1)]) +
                      " only, then 0, non-finite or at the round-off floor; a phase needs " +
                      std::to_string(kAutoMinPoints) + " recorded layers)"
                : "no exponential phase (no decaying straight stretch of ln " + c->measure + ")";
      why += "; fixed window " + win;
    } else {
      why = "fit on " + win;
    }
    if (c->ensemble_quality.poor) why += ": " + c->ensemble_quality.reason;
    else if (most_trials_poor)
      why += ": " + std::to_string(c->poor_fits) + " of " + std::to_string(c->fitted) + " trial fits poor (R^2 < " +
             fmt(kPoorFitR2) + " or the halves' rates differ by more than " + fmt(100 * kPoorFitHalves) + "%)";
    out.push_back(a.path + ": " + c->measure + ": " + why + "; the rate " + fmt(-c->ensemble.slope) +
                  " is a rough average (--window=FROM:TO to choose the layers)");
  }
  return out;
}

std::string analysis_table(const RunAnalysis& a, const AnalysisOptions& o) {
  std::ostringstream os;
  const std::size_t n = a.layer.size();
  os << a.path << ": mask " << a.mask_type << ", norm " << a.norm_type << ", N = " << a.tokens << ", d = " << a.dim
     << ", " << a.trials << " trials, " << n << " recorded layers (" << fmt(a.layer.front()) << " .. "
     << fmt(a.layer.back()) << ")\n";
  os << "  window: " << window_rule(o) << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-18s %12s %10s %-15s %7s %12s %10s %10s %12s %7s\n", "decay rate/layer", "ensemble",
                "+-stderr", "window", "R^2", "trial mean", "std", "sem", "[q10, q90]", "fitted");
  os << line;
  for (const CurveRates* c : {&a.mu, &a.rank_one_residual}) {
    const std::string win =
        c->ensemble.points ? fmt(c->ensemble.first_layer, "%.0f") + ".." + fmt(c->ensemble.last_layer, "%.0f") : "-";
    std::snprintf(line, sizeof line, "  %-18s %12s %10s %-15s %7s %12s %10s %10s %12s %3d/%-3d\n", c->measure.c_str(),
                  fmt(-c->ensemble.slope).c_str(), fmt(c->ensemble.slope_stderr, "%.2g").c_str(), win.c_str(),
                  fmt(c->ensemble.r2, "%.4f").c_str(),
                  fmt(c->mean).c_str(), fmt(c->std, "%.2g").c_str(), fmt(c->sem, "%.2g").c_str(),
                  ("[" + fmt(c->q10, "%.3g") + ", " + fmt(c->q90, "%.3g") + "]").c_str(), c->fitted, a.trials);
    os << line;
  }
  os << "  collapse depth (first layer with mu_rel < " << fmt(o.threshold) << "): ";
  if (a.collapsed_fraction > 0)
    os << "median " << fmt(a.collapse_depth_median) << " over the " << fmt(100 * a.collapsed_fraction, "%.0f")
       << "% of trials that collapsed\n";
  else
    os << "never reached in any trial\n";
  os << "  theory: radius r = " << a.radius << ", eps = min attn_min = " << fmt(a.eps)
     << ", bound rate -ln(1 - eps^r)/r = ";
  // Where eps^r underflows the rate is 0 in double and the ratio inf: give both as powers of 10.
  if (std::isfinite(a.rate_ratio) && a.bound_rate > 0)
    os << fmt(a.bound_rate) << ", measured/bound = " << fmt(a.rate_ratio) << "\n";
  else
    os << "10^" << fmt(a.log10_bound_rate) << ", measured/bound = 10^" << fmt(a.log10_rate_ratio) << "\n";
  if (a.plateaus.enabled()) os << plateau_table(a.plateaus);
  return os.str();
}

}  // namespace rcsim
