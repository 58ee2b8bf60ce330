// Plateaus and merge times of a series (sim/kernel/measures/plateaus.hpp) and `rcsim analyze
// --plateaus` (sim/app/plateau_analysis.hpp). Reference values are worked by hand in the comments;
// analysis/metastability.py has the same definition (tests/python/check_plateaus.py runs both).
#include <catch2/catch.hpp>

#include "cli_support.hpp"

#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "io/hdf5_file.hpp"
#include "kernel/measures/plateaus.hpp"

using namespace rcsim;
using Catch::Matchers::WithinAbs;
namespace fs = std::filesystem;
using test::temp_path;

namespace {
std::vector<double> iota(std::size_t n) {
  std::vector<double> t;
  for (std::size_t i = 0; i < n; ++i) t.push_back(static_cast<double>(i));
  return t;
}
}  // namespace

TEST_CASE("plateaus of an integer staircase with rtol 0: the runs of equal values", "[plateaus]") {
  // Cluster counts 1 (t = 0..4), 3 (5..8), 2 (9..14), 0 (15..19). D = 0: sample k is flat when
  // y_{k+1} = y_{k-1} (the ends when y_1 = y_0, y_19 = y_18): every run's samples but its ends, which the
  // run's median (its value) takes back. Each jump's midpoint is crossed halfway through its step, so
  // the merge times are 4.5, 8.5 and 14.5.
  const std::vector<double> y = {1, 1, 1, 1, 1, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0};
  const std::vector<double> t = iota(y.size());
  const std::vector<Plateau> p = find_plateaus(t, y, 0.0, 0.0);
  REQUIRE(p.size() == 4);
  const double first[] = {0, 5, 9, 15}, last[] = {4, 8, 14, 19}, value[] = {1, 3, 2, 0};
  for (std::size_t k = 0; k < 4; ++k) {
    CHECK(p[k].first == first[k]);
    CHECK(p[k].last == last[k]);
    CHECK(p[k].start == first[k]);
    CHECK(p[k].end == last[k]);
    CHECK(p[k].value == value[k]);
  }
  CHECK(merge_times(t, y, p) == std::vector<double>{4.5, 8.5, 14.5});
  // D = 5: half-windows of three samples (t_k - 2 .. t_k, t_k .. t_k + 2); 5..8 has no flat sample (each
  // window reaches a 1 or a 2), 0..4 and 15..19 last 4 < 5: only 9..14 (5). D = 4: the same windows;
  // 0..4 and 15..19 last 4 >= 4: three plateaus.
  const std::vector<Plateau> long5 = find_plateaus(t, y, 0.0, 5.0);
  REQUIRE(long5.size() == 1);
  CHECK(long5[0].first == 9);
  CHECK(find_plateaus(t, y, 0.0, 4.0).size() == 3);
}

TEST_CASE("plateaus: flat samples, refined to the samples within tol of the median, merges interpolated",
          "[plateaus]") {
  // Range 1.01, rtol 0.02: tol 0.0202; D = 0, so each half-window is a sample and its neighbour: sample k is
  // flat when |y_{k+1} - y_{k-1}| / 2 <= tol (at the ends |y_1 - y_0| / 2, |y_9 - y_8| / 2). Flat: 0, 1
  // (|0 - 0| / 2), 4, 5, 6 (0.005 each), 9; not 2, 3 (0.495, 0.5), 7, 8 (0.255, 0.25). Cores 0..1, 4..6, 9.
  // Core 0..1: median 0.005, extended over y_2 = 0 (y_3 = 1 is not within tol): 0..2, median 0, stable;
  // value 0.01 / 3. Core 4..6: median 1, extended over y_3 and y_7: 3..7, value 1. Core 9: extended over
  // y_8: 8..9, value 0.5. Merges: midpoint (0.01/3 + 1) / 2 crossed between t = 2 (y 0) and 3 (y 1) at
  // 2 + mid; midpoint 0.75 between t = 7 (y 1) and 8 (y 0.5) at 7.5.
  const std::vector<double> y = {0.0, 0.01, 0.0, 1.0, 1.0, 0.99, 1.01, 1.0, 0.5, 0.5};
  const std::vector<double> t = iota(y.size());
  const std::vector<Plateau> p = find_plateaus(t, y, 0.02, 0.0);
  REQUIRE(p.size() == 3);
  CHECK(p[0].first == 0);
  CHECK(p[0].last == 2);
  CHECK_THAT(p[0].value, WithinAbs(0.01 / 3, 1e-16));
  CHECK(p[1].first == 3);
  CHECK(p[1].last == 7);
  CHECK_THAT(p[1].value, WithinAbs(1.0, 1e-15));
  CHECK(p[2].first == 8);
  CHECK(p[2].value == 0.5);
  const std::vector<double> m = merge_times(t, y, p);
  REQUIRE(m.size() == 2);
  CHECK_THAT(m[0], WithinAbs(2.0 + 0.5 * (0.01 / 3 + 1.0), 1e-15));
  CHECK_THAT(m[1], WithinAbs(7.5, 1e-15));
  // rtol 0.005 (tol 0.00505): the same flat samples (0.005 <= tol). Core 0..1 -> 0..2 as above (its
  // median 0; y_1 = 0.01 is inside the run, only the ends are trimmed). Core 4..6: median 1; y_6 = 1.01
  // and y_5 = 0.99 are 0.01 from it, trimmed: 4, extended over y_3: 3..4, value 1. Core 9 -> 8..9.
  const std::vector<Plateau> tight = find_plateaus(t, y, 0.005, 0.0);
  REQUIRE(tight.size() == 3);
  CHECK(tight[0].last == 2);
  CHECK(tight[1].first == 3);
  CHECK(tight[1].last == 4);
  CHECK_THAT(tight[1].value, WithinAbs(1.0, 1e-15));
  CHECK(tight[2].first == 8);
  CHECK(merge_times(t, y, tight)[1] == 7.5);  // the midpoint 0.75 between t = 7 (1.0) and 8 (0.5)
}

TEST_CASE("one level interrupted by a blip is one plateau, with no merge inside it", "[plateaus]") {
  // Range 0.5, rtol 0.002: tol 0.001, D = 0. Flat (|y_{k+1} - y_{k-1}| / 2 <= tol): 0, 1, 3 (its
  // neighbours are equal: a one-sample blip does not see itself), 5, 8, 9. Cores 0..1 -> 0..2 (0.31 is
  // not within tol of 0.3); core 3: median 0.31, no neighbour within tol: one sample, no plateau; core 5
  // -> 4..6; core 8..9 -> 7..9. The plateaus 0..2 and 4..6 (both 0.3) are one level: joined 0..6 (issue
  // 37: the detector had reported a merge between them); one merge, the midpoint 0.55 at 6.5.
  const std::vector<double> y = {0.3, 0.3, 0.3, 0.31, 0.3, 0.3, 0.3, 0.8, 0.8, 0.8};
  const std::vector<double> t = iota(y.size());
  const std::vector<Plateau> p = find_plateaus(t, y, 0.002, 0.0);
  REQUIRE(p.size() == 2);
  CHECK(p[0].first == 0);
  CHECK(p[0].last == 6);
  CHECK(p[0].start == 0);
  CHECK(p[0].end == 6);
  CHECK(p[0].value == 0.3);
  CHECK(merge_times(t, y, p) == std::vector<double>{6.5});
  // Joined values are the mean of both plateaus' samples: 0..2 at 0.3 and 4..8 at 0.3008 (within tol of
  // 0.3): (3 x 0.3 + 5 x 0.3008) / 8; 0.8 alone is no plateau.
  const std::vector<double> drift = {0.3, 0.3, 0.3, 0.31, 0.3008, 0.3008, 0.3008, 0.3008, 0.3008, 0.8};
  const std::vector<Plateau> d = find_plateaus(t, drift, 0.002, 0.0);
  REQUIRE(d.size() == 1);
  CHECK(d[0].last == 8);
  CHECK_THAT(d[0].value, WithinAbs((3 * 0.3 + 5 * 0.3008) / 8, 1e-15));
  // An integer count flickering for one sample inside a run (rtol 0): the median keeps the level.
  const std::vector<double> count = {2, 2, 2, 3, 2, 2, 2, 5, 5, 5};
  const std::vector<Plateau> c = find_plateaus(t, count, 0.0, 0.0);
  REQUIRE(c.size() == 2);
  CHECK(c[0].last == 6);
  CHECK(c[1].first == 7);
  CHECK(c[1].value == 5);
}

TEST_CASE("one level drifting before a jump is one plateau, with one merge", "[plateaus]") {
  // y = 0.2 + 1.2e-3 (k/50)^2 for k < 50, then 0.3: range 0.1, rtol 5e-3: tol 5e-4, D = 5 (half-windows of
  // three samples). The drift's half-window means differ by about 2 y' = 1.9e-6 k << tol: flat up to k =
  // 47 (k = 48's window holds 0.3). Core 0..47: median (y_23 + y_24) / 2 = 0.2 + 2.652e-4; trimmed to k^2
  // <= 1594: 0..39; median 0.2 + 1.826e-4, k^2 <= 1422: 0..37; median 0.2 + 1.644e-4, k^2 <= 1384: 0..37,
  // stable (y_38 not within tol). Its halves' medians (k = 9 and 28) differ by 3.4e-4 = 0.67 tol <= 0.75
  // tol: a level. The second level: flat from k = 52, extended to 50..99. One merge (issue 37: the detector
  // had split the level at k = 39 and reported a merge there): where the midpoint is crossed, 49..50.
  std::vector<double> y;
  const std::vector<double> t = iota(100);
  for (double k : t) y.push_back(k < 50 ? 0.2 + 1.2e-3 * (k / 50) * (k / 50) : 0.3);
  const std::vector<Plateau> p = find_plateaus(t, y, 5e-3, 5.0);
  REQUIRE(p.size() == 2);
  CHECK(p[0].first == 0);
  CHECK(p[0].last == 37);
  CHECK(p[1].first == 50);
  CHECK(p[1].last == 99);
  const double mid = 0.5 * (p[0].value + 0.3);
  const std::vector<double> m = merge_times(t, y, p);
  REQUIRE(m.size() == 1);
  CHECK_THAT(m[0], WithinAbs(49.0 + (mid - y[49]) / (0.3 - y[49]), 1e-12));
}

TEST_CASE("a ramp has no plateau, a constant one, and bad input is refused", "[plateaus]") {
  // D = 0: a ramp's neighbours differ by 2 x 1 / 2 = 1 > tol = 49e-4.
  const std::vector<double> t = iota(50);
  CHECK(find_plateaus(t, t, 1e-4, 0.0).empty());
  const std::vector<Plateau> flat = find_plateaus(t, std::vector<double>(50, 2.0), 0.0, 0.0);
  REQUIRE(flat.size() == 1);
  CHECK(flat[0].last == 49);
  CHECK(merge_times(t, std::vector<double>(50, 2.0), flat).empty());
  CHECK(default_min_duration(t) == 0.02 * 49);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(find_plateaus({0, 1}, {1, nan}, 0.0, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(find_plateaus({0, 1}, {1}, 0.0, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(find_plateaus({}, {}, 0.0, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(find_plateaus({0, 1}, {1, 1}, -0.1, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(find_plateaus({0, 1}, {1, 1}, 0.0, nan), std::invalid_argument);
  CHECK_THROWS_AS(find_plateaus({1, 0}, {1, 1}, 0.0, 0.0), std::invalid_argument);
}

TEST_CASE("analyze --plateaus on a particle run: /analysis/plateaus, the table, bad options", "[plateaus][cli]") {
  // Eight tokens on S^2, SA flow at beta = 1 (RK4): the clusters merge.
  const std::string out = temp_path("rcsim_plateaus_particles.h5");
  fs::remove(out);
  REQUIRE(cli_main({"run", "--config", "/dev/null", "--model.tokens=8", "--model.dim=3", "--model.layers=400",
                    "--weights.q=identity", "--weights.k=identity", "--weights.v=identity", "--weights.shared=true",
                    "--model.beta=1", "--norm.type=sphere", "--residual.alpha=0.05", "--residual.project=tangent",
                    "--dynamics.integrator=rk4", "--run.trials=2", "--output.measures=energy,clusters_99",
                    "--output.file=" + out, "--quiet"}) == 0);
  const test::Outcome ok = test::run_cli({"analyze", out, "--plateaus=clusters_99", "--plateau-rtol=0", "--quiet"});
  REQUIRE(ok.status == 0);
  CHECK(ok.out.find("plateaus of clusters_99 against time") != std::string::npos);
  const h5::File f = h5::File::open_read(out);
  REQUIRE(f.exists("analysis/plateaus/value"));
  const h5::Group g = f.open_group("analysis/plateaus");
  CHECK(g.attr_string("axis") == "time");
  CHECK(g.attr_string("measure") == "clusters_99");
  const h5::Array y = f.read("metrics/clusters_99"), time = f.read("time");
  const auto trial = g.read("plateau_trial").data, first = g.read("first_sample").data, last = g.read("last_sample").data;
  const auto value = g.read("value").data, start = g.read("start").data;
  REQUIRE(!value.empty());
  const std::size_t n = y.shape[1];
  // rtol 0: every sample of a plateau has its value, the samples just outside it do not, and its
  // start is the time of its first sample.
  for (std::size_t k = 0; k < value.size(); ++k) {
    const auto i = static_cast<std::size_t>(trial[k]), a = static_cast<std::size_t>(first[k]),
               b = static_cast<std::size_t>(last[k]);
    CHECK(b > a);
    for (std::size_t j = a; j <= b; ++j) CHECK(y.data[i * n + j] == value[k]);
    if (a > 0) CHECK(y.data[i * n + a - 1] != value[k]);
    if (b + 1 < n) CHECK(y.data[i * n + b + 1] != value[k]);
    CHECK(start[k] == time.data[a]);
  }
  // Each trial has one merge fewer than plateaus.
  std::size_t merges = 0;
  for (double c : g.read("plateau_count").data) merges += c > 0 ? static_cast<std::size_t>(c) - 1 : 0;
  CHECK(g.read("merge_time").data.size() == merges);
  // Bad options: exit 2, the allowed measures named, nothing written.
  const test::Outcome unknown = test::run_cli({"analyze", out, "--plateaus=entropy", "--no-write"});
  CHECK(unknown.status == 2);
  CHECK(unknown.err.find("allowed: none, or a measure") != std::string::npos);
  for (const char* name : {"clusters_99", "energy", "mu", "attn_entropy"}) CHECK(unknown.err.find(name) != std::string::npos);
  test::check_usage_errors({{"analyze", out, "--plateaus=energy", "--plateau-rtol=-1"},
                            {"analyze", out, "--plateaus=energy", "--plateau-rtol=nan"},
                            {"analyze", out, "--plateaus=energy", "--plateau-min-duration=-2"},
                            {"analyze", out, "--plateaus=energy", "--plateau-min-duration=abc"},
                            {"analyze", out, "--plateaus=energy", "--plateau-min-duration=Auto"},
                            {"analyze", out, "--plateaus=time"}},
                           {});
  const test::Outcome bad_auto = test::run_cli({"analyze", out, "--plateaus=energy", "--plateau-min-duration=Auto"});
  CHECK(bad_auto.err.find("--plateau-min-duration=Auto: expected auto or a finite number >= 0") != std::string::npos);
  // The default: 2% of the axis' span, named in the file.
  REQUIRE(test::run_cli({"analyze", out, "--plateaus=energy", "--quiet"}).status == 0);
  const h5::File g2 = h5::File::open_read(out);
  const h5::Group auto_group = g2.open_group("analysis/plateaus");
  CHECK(auto_group.attr_double("min_duration") == 0.02 * (time.data.back() - time.data.front()));
  CHECK(auto_group.attr_string("min_duration_source").rfind("auto", 0) == 0);
}
