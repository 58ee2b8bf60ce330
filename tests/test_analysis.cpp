// Collapse rates, windows, collapse depth, theory bound and `rcsim analyze` (sim/kernel/measures/decay_fit.hpp,
// sim/app/analysis.hpp). Reference values are worked by hand in the comments.
#include <catch2/catch.hpp>

#include "cli_support.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "app/analysis.hpp"
#include "cli/cli.hpp"
#include "kernel/measures/decay_fit.hpp"
#include "io/hdf5_file.hpp"

using namespace rcsim;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;
namespace fs = std::filesystem;
using test::temp_path;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("the log-linear fit recovers the rate of an exact exponential", "[analysis]") {
  // y = 3 exp(-0.37 t) on an irregular layer grid (as a metric schedule would record).
  const std::vector<double> t = {0, 1, 2, 4, 8, 16, 32, 33, 50};
  std::vector<double> y;
  for (double x : t) y.push_back(3.0 * std::exp(-0.37 * x));
  const LogLinearFit f = fit_log_linear(t, y, 0, static_cast<int>(t.size()) - 1);
  CHECK(f.points == 9);
  CHECK_THAT(f.slope, WithinAbs(-0.37, 1e-13));
  CHECK_THAT(f.intercept, WithinAbs(std::log(3.0), 1e-12));
  CHECK_THAT(f.r2, WithinAbs(1.0, 1e-12));
  CHECK(f.slope_stderr < 1e-12);
  // A sub-window gives the same rate; fewer than 3 points gives none.
  CHECK_THAT(fit_log_linear(t, y, 3, 6).slope, WithinAbs(-0.37, 1e-13));
  CHECK(std::isnan(fit_log_linear(t, y, 3, 4).slope));
  // Noise: ln y = -0.5 t + (+d, -d, +d, -d) on t = 0..3. Slope by hand: sum dt*dy / sum dt^2 with
  // dt = (-1.5, -0.5, 0.5, 1.5): -0.5 + d (-1.5 + 0.5 + 0.5 - 1.5) / 5 = -0.5 - 0.4 d.
  const double d = 0.1;
  const std::vector<double> t4 = {0, 1, 2, 3};
  const std::vector<double> y4 = {std::exp(d), std::exp(-0.5 - d), std::exp(-1.0 + d), std::exp(-1.5 - d)};
  CHECK_THAT(fit_log_linear(t4, y4, 0, 3).slope, WithinAbs(-0.5 - 0.4 * d, 1e-14));
}

TEST_CASE("the default window skips the transient and stops before the floor", "[analysis]") {
  std::vector<double> t, y;
  for (int i = 0; i <= 100; ++i) {
    t.push_back(i);
    y.push_back(std::exp(-0.5 * i));
  }
  SECTION("relative floor 1e-13") {
    // exp(-0.5 t) < 1e-13 first at t = 60 (0.5 * 59 = 29.5 < 29.93 < 30): usable 0..59;
    // transient ceil(0.1 * 59) = 6 layers: window 6..59.
    CHECK(last_usable_index(y, y) == 59);
    const FitWindow w = default_window(t, y, y);
    CHECK(w.first == 6);
    CHECK(w.last == 59);
  }
  SECTION("a non-finite value or an underflow ends the usable range") {
    auto yn = y;
    yn[30] = kNaN;  // usable 0..29, transient ceil(2.9) = 3: window 3..29
    FitWindow w = default_window(t, yn, yn);
    CHECK(w.first == 3);
    CHECK(w.last == 29);
    yn[30] = y[30];
    yn[12] = 0.0;  // underflowed to zero: usable 0..11, transient max(1, ceil(1.1)) = 2
    w = default_window(t, yn, yn);
    CHECK(w.first == 2);
    CHECK(w.last == 11);
  }
  SECTION("a curve that never collapses is fitted over all layers but the first 10%") {
    const std::vector<double> flat(101, 0.7);
    const FitWindow w = default_window(t, flat, flat);
    CHECK(w.first == 10);
    CHECK(w.last == 100);
  }
  SECTION("irregular layers: the skip is counted in layers, not in points") {
    const std::vector<double> ts = {0, 5, 10, 20, 40, 80};
    const std::vector<double> ys = {1, 0.5, 0.3, 0.1, 0.01, 0.001};
    const FitWindow w = default_window(ts, ys, ys);  // skip ceil(8) = 8 layers: first t >= 8 is 10
    CHECK(w.first == 2);
    CHECK(w.last == 5);
  }
  SECTION("a user window in layers") {
    const FitWindow w = layer_window(t, y, 10, 20);
    CHECK(w.first == 10);
    CHECK(w.last == 20);
  }
}

TEST_CASE("the auto window finds the exponential phase of synthetic curves", "[analysis][window]") {
  std::vector<double> t;
  for (int i = 0; i <= 100; ++i) t.push_back(i);
  SECTION("exponential, then a round-off floor") {
    // y = exp(-0.5 t) down to 1e-15 (t = 69.1), then the floor 1e-15 (mu_rel-like): usable up to
    // t = 59 (the last y >= 1e-13); the whole usable range is one straight line: window 0..59.
    std::vector<double> y;
    for (double x : t) y.push_back(std::max(std::exp(-0.5 * x), 1e-15));
    const ExponentialPhase p = exponential_window(t, y, y);
    CHECK(p.found);
    CHECK(p.window.first == 0);
    CHECK(p.window.last == 59);
    const LogLinearFit f = fit_log_linear(t, y, p.window.first, p.window.last);
    CHECK_THAT(f.slope, WithinAbs(-0.5, 1e-12));
    CHECK_FALSE(fit_quality(t, y, f, p.window).poor);
  }
  SECTION("a floor above the cut: the plateau is left out") {
    // y = exp(-0.4 t) + 1e-8 (a floor of 1e-8 the 1e-13 cut does not see): ln y is straight
    // while exp(-0.4 t) >> 1e-8, i.e. up to t ~ 35 (exp(-14) = 8.3e-7, 1% above the line),
    // and flat after t ~ 50. The fixed window fits the whole 10..100 (a rate of 0.14, R^2 0.71);
    // the auto window ends in the bend (at t = 48 in a NumPy transcription of the rule) and its
    // rate is within 3% of 0.4.
    std::vector<double> y;
    for (double x : t) y.push_back(std::exp(-0.4 * x) + 1e-8);
    const ExponentialPhase p = exponential_window(t, y, y);
    REQUIRE(p.found);
    CHECK(p.window.first <= 2);
    CHECK(p.window.last >= 35);
    CHECK(p.window.last <= 52);
    const LogLinearFit f = fit_log_linear(t, y, p.window.first, p.window.last);
    CHECK_THAT(-f.slope, WithinRel(0.4, 0.03));
    const FitWindow fixed = default_window(t, y, y);
    const LogLinearFit g = fit_log_linear(t, y, fixed.first, fixed.last);
    CHECK(-g.slope < 0.2);
    CHECK(fit_quality(t, y, g, fixed).poor);
  }
  SECTION("two phases: a slow transient of 30 layers, then the exponential phase of 70") {
    // ln y = -0.05 t for t <= 30, then -1.5 - 0.3 (t - 30) (down to -22.5: all usable). The
    // longest straight stretch is the fast phase, taking in a few layers of the bend (the
    // halves' test sees a kink only beyond 10% of the slope): it starts at t in 20..31 and ends at
    // 100, its rate within 3% of 0.3; the fixed window (10..100) mixes both phases.
    std::vector<double> y;
    for (double x : t) y.push_back(std::exp(x <= 30 ? -0.05 * x : -1.5 - 0.3 * (x - 30)));
    const ExponentialPhase p = exponential_window(t, y, y);
    REQUIRE(p.found);
    CHECK(p.window.first >= 20);
    CHECK(p.window.first <= 31);
    CHECK(p.window.last == 100);
    const LogLinearFit f = fit_log_linear(t, y, p.window.first, p.window.last);
    CHECK_THAT(-f.slope, WithinRel(0.3, 0.03));
    const FitWindow fixed = default_window(t, y, y);
    const LogLinearFit g = fit_log_linear(t, y, fixed.first, fixed.last);
    CHECK(-g.slope < 0.29);
    const FitQuality q = fit_quality(t, y, g, fixed);
    // Halves of 10..100 (mid 55): 10..55 mixes the phases, 56..100 is pure 0.3.
    CHECK_THAT(q.second_half_rate, WithinRel(0.3, 1e-9));
    CHECK(q.first_half_rate < 0.25);
  }
  SECTION("no exponential phase: a flat or growing curve falls back to the fixed window") {
    const std::vector<double> flat(101, 0.7);
    ExponentialPhase p = exponential_window(t, flat, flat);
    CHECK_FALSE(p.found);
    CHECK(p.window.first == 10);
    CHECK(p.window.last == 100);
    std::vector<double> up;
    for (double x : t) up.push_back(std::exp(0.01 * x));
    p = exponential_window(t, up, up);
    CHECK_FALSE(p.found);
  }
  SECTION("the halves of a window by hand") {
    // ln y = -t on 0..3 and -3 - 3 (t - 3) on 3..7: window 0..7, mid 3: halves 0..3 (rate 1)
    // and 4..7 (rate 3); relative difference |1 - 3| / rate of the whole.
    const std::vector<double> t8 = {0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<double> y8;
    for (double x : t8) y8.push_back(std::exp(x <= 3 ? -x : -3 - 3 * (x - 3)));
    const LogLinearFit f = fit_log_linear(t8, y8, 0, 7);
    const FitQuality q = fit_quality(t8, y8, f, {0, 7});
    CHECK_THAT(q.first_half_rate, WithinAbs(1.0, 1e-12));
    CHECK_THAT(q.second_half_rate, WithinAbs(3.0, 1e-12));
    CHECK_THAT(q.halves_difference, WithinRel(2.0 / -f.slope, 1e-12));
    CHECK(q.poor);
    CHECK(q.reason.find("halves") != std::string::npos);
  }
}

TEST_CASE("collapse depth is the first recorded layer below the threshold", "[analysis]") {
  const std::vector<double> t = {0, 1, 2, 4, 8, 16, 32};
  const std::vector<double> rel = {1, 0.5, kNaN, 0.01, 0.0005, 0.002, 1e-5};
  CHECK(collapse_depth(t, rel, 1e-3) == 8.0);
  CHECK(collapse_depth(t, rel, 1e-2) == 8.0);  // strictly below: 0.01 does not count
  CHECK(collapse_depth(t, rel, 0.6) == 1.0);
  CHECK(collapse_depth(t, rel, 1e-6) == -1.0);
}

TEST_CASE("the theory bound from given r and eps", "[analysis]") {
  // eps = 0.1, r = 2: eps^r = 0.01, rate -ln(0.99) / 2 = 0.005025167926750725 (by hand / bc -l).
  CHECK_THAT(bound_rate(0.1, 2), WithinRel(0.005025167926750725, 1e-14));
  // C (1 - eps^r)^(t/r) with C = 2, t = 4: 2 * 0.99^2 = 1.9602.
  CHECK_THAT(theory_bound(2.0, 0.1, 2, 4.0), WithinRel(1.9602, 1e-14));
  CHECK_THAT(theory_bound(2.0, 0.5, 1, 3.0), WithinRel(0.25, 1e-14));  // 2 * 0.5^3
  CHECK(bound_rate(0.0, 3) == 0.0);                                    // eps = 0: no guaranteed decay
  CHECK(std::isnan(bound_rate(0.2, -1)));                              // no centre node: the theorem does not apply
  // log10 of the rate, in log space: equal to log10(bound_rate) where that is finite ...
  CHECK_THAT(log10_bound_rate(0.1, 2), WithinRel(std::log10(0.005025167926750725), 1e-14));
  CHECK_THAT(log10_bound_rate(1e-5, 3), WithinRel(std::log10(-std::log1p(-1e-15) / 3), 1e-12));
  // ... and finite where eps^r underflows: eps = 1e-200, r = 3: rate 1e-600 / 3 (by hand)
  CHECK(bound_rate(1e-200, 3) == 0.0);
  CHECK_THAT(log10_bound_rate(1e-200, 3), WithinRel(-600.0 - std::log10(3.0), 1e-14));
  CHECK(log10_bound_rate(0.0, 3) == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(log10_bound_rate(0.2, -1)));
}

namespace {
// A run file written by hand: /layer = 0, 3, 6, ... (a metric schedule), mu = mu_rel =
// rank_one_residual = c_trial exp(-0.2 t), attn_min = 0.25, mask radius 2.
std::string synthetic_run_file(const std::string& name) {  // a name per test case: ctest runs them in parallel
  const std::string path = temp_path(name);
  const int T = 3, n = 21;
  std::vector<std::int64_t> layer(n), trial(T);
  std::vector<double> mu(T * n), attn(T * n, 0.25);
  for (int j = 0; j < n; ++j) layer[j] = 3 * j;
  for (int i = 0; i < T; ++i) {
    trial[i] = i;
    for (int j = 0; j < n; ++j) mu[i * n + j] = (0.5 + 0.2 * i) * std::exp(-0.2 * 3 * j);
  }
  const h5::File f = h5::File::create(path);
  f.set_attr("filetype", "rcsim-run");
  f.set_attr("complete", 1);
  f.set_attr("mask_type", "custom");
  f.set_attr("norm_type", "none");
  f.set_attr("tokens", 4);
  f.set_attr("dim", 2);
  f.write("layer", {static_cast<hsize_t>(n)}, layer.data()).make_scale("layer");
  f.write("trial", {static_cast<hsize_t>(T)}, trial.data()).make_scale("trial");
  std::vector<std::uint8_t> mask(16, 1);
  f.write("mask", {4, 4}, mask.data()).set_attr("radius", 2);
  const h5::Group m = f.create_group("metrics");
  for (const char* measure : {"mu", "mu_rel", "rank_one_residual"})
    m.write(measure, {static_cast<hsize_t>(T), static_cast<hsize_t>(n)}, mu.data());
  m.write("attn_min", {static_cast<hsize_t>(T), static_cast<hsize_t>(n - 1)}, attn.data());
  return path;
}
}  // namespace

TEST_CASE("analyze reads the layer coordinate from /layer and writes /analysis", "[analysis]") {
  const std::string path = synthetic_run_file("rcsim_analysis_synthetic.h5");
  AnalysisOptions o;
  const RunAnalysis a = analyze_run(path, o);
  REQUIRE(a.layer.size() == 21);
  CHECK(a.layer[1] == 3.0);
  for (const auto& f : a.mu.trial) CHECK_THAT(f.slope, WithinAbs(-0.2, 1e-12));
  CHECK_THAT(a.mu.mean, WithinAbs(0.2, 1e-12));
  CHECK_THAT(-a.mu.ensemble.slope, WithinAbs(0.2, 1e-12));
  // Auto window: c exp(-0.2 t) >= 1e-13 up to t = 147 (last recorded 60: all usable), one
  // straight line: the whole range 0..60.
  CHECK(a.mu.trial[0].first_layer == 0.0);
  CHECK(a.mu.trial[0].last_layer == 60.0);
  CHECK(a.mu.ensemble_phase_found);
  CHECK_FALSE(a.mu.ensemble_quality.poor);
  CHECK(fit_warnings(a, o).empty());
  // Fixed window: skip ceil(6) = 6 layers: from t = 6.
  AnalysisOptions fixed;
  fixed.window = AnalysisOptions::Window::fixed;
  const RunAnalysis af = analyze_run(path, fixed);
  CHECK(af.mu.trial[0].first_layer == 6.0);
  CHECK(af.mu.trial[0].last_layer == 60.0);
  CHECK_THAT(-af.mu.ensemble.slope, WithinAbs(0.2, 1e-12));
  // Collapse depth 1e-3: 0.5 exp(-0.2 t) < 1e-3 for t > 31.07: first recorded layer 33.
  CHECK(a.collapse_depth[0] == 33.0);
  // eps = 0.25, r = 2: bound rate -ln(1 - 1/16) / 2 = 0.032269... ; ratio 0.2 / that.
  CHECK(a.radius == 2);
  CHECK(a.eps == 0.25);
  CHECK_THAT(a.bound_rate, WithinRel(-std::log(15.0 / 16.0) / 2.0, 1e-14));
  CHECK_THAT(a.rate_ratio, WithinRel(0.2 / (-std::log(15.0 / 16.0) / 2.0), 1e-10));
  write_analysis(a, o);
  write_analysis(a, o);  // a second write replaces the group
  const h5::File f = h5::File::open_read(path);
  CHECK_FALSE(fs::exists(path + ".analysis.tmp"));
  const h5::Array rate = f.read("analysis/mu/decay_rate");
  REQUIRE(rate.shape == std::vector<hsize_t>{3});
  CHECK_THAT(rate.data[2], WithinAbs(0.2, 1e-12));
  const h5::Array bound = f.read("analysis/theory/bound");
  REQUIRE(bound.shape == std::vector<hsize_t>{3, 21});
  // Trial 1: C = 0.7, layer 6 (index 2): 0.7 (15/16)^3.
  CHECK_THAT(bound.data[21 + 2], WithinRel(0.7 * std::pow(15.0 / 16.0, 3.0), 1e-13));
}

TEST_CASE("analyze on a simulated run: causal N = 2 with uniform attention halves mu per layer", "[analysis]") {
  // x_0 fixed, x_1(t+1) = (x_0 + x_1(t)) / 2: mu(t) = mu(0) 2^-t; attention weights 1 and 1/2,
  // so eps = 1/2, r = 1 and the bound rate -ln(1 - 1/2) = ln 2 equals the measured rate.
  const std::string out = temp_path("rcsim_analysis_causal2.h5");
  fs::remove(out);
  REQUIRE(cli_main({"run", "--config", "/dev/null", "--model.tokens=2", "--model.dim=2", "--model.layers=60",
                    "--mask.type=causal", "--weights.q=zero", "--weights.k=zero", "--weights.v=identity",
                    "--run.trials=2", "--output.file=" + out, "--quiet"}) == 0);
  // Tolerance 1e-5: near the window's end (mu_rel ~ 1e-13) mu is a difference of nearly equal
  // tokens and carries a relative round-off error of ~1e-3, which moves the slope by ~1e-6.
  const RunAnalysis a = analyze_run(out, {});
  CHECK_THAT(-a.mu.ensemble.slope, WithinRel(std::log(2.0), 1e-5));
  CHECK_THAT(a.mu.mean, WithinRel(std::log(2.0), 1e-5));
  CHECK(a.eps == 0.5);
  CHECK(a.radius == 1);
  CHECK_THAT(a.rate_ratio, WithinRel(1.0, 1e-5));
  CHECK(cli_main({"analyze", out, "--quiet"}) == 0);
  CHECK(h5::File::open_read(out).exists("analysis/theory/bound_median"));
  // options with a space, as the configuration keys allow: "--threshold 0.5" = "--threshold=0.5"
  CHECK(cli_main({"analyze", out, "--threshold", "0.5", "--window", "2:20", "--quiet"}) == 0);
  CHECK(h5::File::open_read(out).open_group("analysis").attr_double("threshold") == 0.5);
  CHECK(cli_main({"analyze", out, "--threshold", "abc", "--quiet"}) == 2);
}

TEST_CASE("the unidirectional window of configs/default.ini: the auto window fits the collapse", "[analysis][window]") {
  // The case of the issue that introduced the auto window: configs/default.ini's unidirectional
  // point (N = 32, d = 16, window 2, orthogonal W_V) run deep. Its median ln mu bends
  // continuously: flat for ~20 layers, then the local rate rises 0.06, 0.24, 0.41, 0.53, 0.61,
  // 0.65, 0.67 (per 10 layers from t = 20) until the round-off floor at t ~ 85. The fixed window
  // (10..83) averages the bend: rate 0.41, R^2 0.92 (a poor fit: warned). The auto window finds
  // the straight late stretch (53..83 with 32 trials): rate 0.63, R^2 > 0.99.
  const std::string out = temp_path("rcsim_analysis_unidirectional.h5");
  REQUIRE(cli_main({"run", "--model.tokens=32", "--model.dim=16", "--model.layers=120",
                    "--mask.type=unidirectional_sliding_window", "--mask.window=2", "--weights.v=orthogonal",
                    "--run.trials=8", "--run.seed=20240527", "--output.file=" + out, "--quiet", "--force"}) == 0);
  AnalysisOptions fixed;
  fixed.window = AnalysisOptions::Window::fixed;
  const RunAnalysis f = analyze_run(out, fixed);
  const RunAnalysis a = analyze_run(out, {});
  INFO("fixed: " << -f.mu.ensemble.slope << " on " << f.mu.ensemble.first_layer << ".." << f.mu.ensemble.last_layer
                 << " R^2 " << f.mu.ensemble.r2 << "; auto: " << -a.mu.ensemble.slope << " on "
                 << a.mu.ensemble.first_layer << ".." << a.mu.ensemble.last_layer << " R^2 " << a.mu.ensemble.r2);
  CHECK(-f.mu.ensemble.slope < 0.5);
  CHECK(f.mu.ensemble_quality.poor);
  CHECK_FALSE(fit_warnings(f, fixed).empty());
  CHECK(a.mu.ensemble_phase_found);
  CHECK(-a.mu.ensemble.slope > 0.55);
  CHECK(-a.mu.ensemble.slope < 0.72);
  CHECK(a.mu.ensemble.first_layer >= 40);
  CHECK(a.mu.ensemble.r2 > 0.99);
  CHECK_FALSE(a.mu.ensemble_quality.poor);
  // rank_one_residual has a slow straight start (0.08 per layer for 30 layers): fewer e-folds
  // than the collapse, so its window is the late one too.
  CHECK(-a.rank_one_residual.ensemble.slope > 0.55);
}

TEST_CASE("analyze: bad inputs exit 2", "[analysis][cli]") {
  const std::string good = synthetic_run_file("rcsim_analysis_synthetic_bad_inputs.h5");
  const std::string text = temp_path("rcsim_analysis_text.h5");
  std::ofstream(text) << "not hdf5\n";
  const std::string other = temp_path("rcsim_analysis_other.h5");
  { const h5::File f = h5::File::create(other); }
  const std::vector<std::vector<std::string>> bad = {
      {"analyze"},
      {"analyze", temp_path("rcsim_no_such_run.h5")},
      {"analyze", text},
      {"analyze", other},
      {"analyze", good, "--threshold=0"},
      {"analyze", good, "--threshold=1.5"},
      {"analyze", good, "--threshold=abc"},
      {"analyze", good, "--window=5"},
      {"analyze", good, "--window=9:3"},
      {"analyze", good, "--frobnicate"},
  };
  test::check_usage_errors(bad, {});
  CHECK_FALSE(h5::File::open_read(good).exists("analysis"));  // nothing written on failure
  CHECK(cli_main({"analyze", good, "--threshold=1e-2", "--window=3:30", "--quiet"}) == 0);
}

TEST_CASE("orthogonal W_V: the measured mu stays under the overlay bound for every mask", "[analysis][theory]") {
  // docs/science/model-spec.md 5.1: with norm-preserving W_V the measured decay sits under C (1 - eps^r)^(t/r);
  // C = mu(0) here, eps and r read back from the run file by analyze_run.
  const std::string mask =
      GENERATE(as<std::string>{}, "complete", "causal", "sliding_window", "unidirectional_sliding_window");
  const std::string out = temp_path("rcsim_analysis_orth_" + mask + ".h5");
  REQUIRE(cli_main({"run", "--config", "/dev/null", "--model.tokens=8", "--model.dim=4", "--model.layers=40",
                    "--mask.type=" + mask, "--mask.window=2", "--weights.v=orthogonal", "--run.trials=4",
                    "--output.file=" + out, "--quiet", "--force"}) == 0);
  const RunAnalysis a = analyze_run(out, {});
  const h5::Array mu = h5::File::open_read(out).read("metrics/mu");
  INFO("mask " << mask << ": r = " << a.radius << ", eps = " << a.eps << ", measured/bound rate " << a.rate_ratio);
  CHECK(a.rate_ratio > 1.0);
  const std::size_t n = a.layer.size();
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < n; ++j)
      CHECK(mu.data[i * n + j] <= theory_bound(a.C[i], a.eps, a.radius, a.layer[j]) * (1 + 1e-12));
}
