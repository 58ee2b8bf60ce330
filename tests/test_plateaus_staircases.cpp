// The plateau detector (sim/kernel/measures/plateaus.hpp) on constructed staircases whose plateaus and
// merges are known in closed form (issue 46): sharp and smooth (tanh, exponential) transitions, a ramp,
// exponential approaches, bounded and Gaussian noise at a third of the tolerance, each at 101, 801 and
// 20001 samples of t in [0, 100], with the default settings (rtol 2e-3, D = 2% of the span = 2).
// The expected positions are solved from the curves; none is taken from the detector's output.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernel/measures/plateaus.hpp"

using namespace rcsim;

namespace {

constexpr double kRtol = 2e-3;
const std::vector<double> kLevels = {0.0, 0.3, 0.5, 1.0};  // range 1: tol = rtol = 2e-3
const std::vector<double> kJumps = {25.0, 50.0, 75.0};

std::vector<double> grid(std::size_t n) {
  std::vector<double> t(n);
  for (std::size_t k = 0; k < n; ++k) t[k] = 100.0 * static_cast<double>(k) / static_cast<double>(n - 1);
  return t;
}

// levels[0] + sum_i (levels[i+1] - levels[i]) (1 + tanh((t - jumps[i]) / w)) / 2.
double tanh_staircase(double t, double w) {
  double y = kLevels[0];
  for (std::size_t i = 0; i < kJumps.size(); ++i)
    y += (kLevels[i + 1] - kLevels[i]) * 0.5 * (1.0 + std::tanh((t - kJumps[i]) / w));
  return y;
}

// Where a tanh step of height J and width w is c away from its level: |t - jump| = (w / 2) ln(J / c - 1)
// (the step's distance from its lower level is J / (1 + exp(2 (jump - t) / w))).
double reach(double J, double w, double c) { return 0.5 * w * std::log(J / c - 1.0); }

// The plateaus of a tanh staircase of width w with noise bounded by a (0: none): four, each bounded by its
// steps (tol = rtol x the range, 1 + at most 2 a). A sample whose distance from the level is d is within
// tol of the median m when d <= tol - 2a (|m - level| <= a), and not when d > tol + 2a; so each plateau's end lies
// between the times where d = tol - 2a and tol + 2a (one sample spacing dt on), and its value within tol of the level.
// The merge: |mid - y(jump)| <= tol, the noise moves y by a, so |merge - jump| <= w atanh(2 (tol + a) / J), and linear
// interpolation between samples adds at most dt^2 / w (tanh'' <= 0.77 J / w^2 against a slope >= 0.4 J / w within the
// bound).
void check_tanh_staircase(const std::vector<double>& t, const std::vector<double>& y, double w, double a) {
  const double tol = kRtol * (*std::max_element(y.begin(), y.end()) - *std::min_element(y.begin(), y.end()));
  const double dt = t[1] - t[0];
  const std::vector<Plateau> p = find_plateaus(t, y, kRtol, default_min_duration(t));
  REQUIRE(p.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) CHECK(std::abs(p[i].value - kLevels[i]) <= tol);
  CHECK(p[0].start == 0.0);
  CHECK(p[3].end == 100.0);
  for (std::size_t i = 0; i < 3; ++i) {
    const double J = kLevels[i + 1] - kLevels[i];
    const double near = reach(J, w, tol - 2 * a), far = reach(J, w, tol + 2 * a);
    CHECK(p[i].end <= kJumps[i] - far + 1e-9);
    CHECK(p[i].end >= kJumps[i] - near - dt - 1e-9);
    CHECK(p[i + 1].start >= kJumps[i] + far - 1e-9);
    CHECK(p[i + 1].start <= kJumps[i] + near + dt + 1e-9);
  }
  const std::vector<double> m = merge_times(t, y, p);
  REQUIRE(m.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    const double J = kLevels[i + 1] - kLevels[i];
    CHECK(std::abs(m[i] - kJumps[i]) <= w * std::atanh(2 * (tol + a) / J) + dt * dt / w);
  }
}

}  // namespace

TEST_CASE("plateaus of a sharp staircase: its steps, at any sampling", "[plateaus]") {
  for (std::size_t n : {101, 801, 20001}) {
    // y = levels[i] from jumps[i - 1] on; the jumps are samples K_i = i (n - 1) / 4. The plateaus are the
    // runs K_i .. K_{i+1} - 1; each merge is the middle of its step, t_{K_i - 1} + dt / 2.
    const std::vector<double> t = grid(n);
    const std::size_t q = (n - 1) / 4;
    std::vector<double> y(n);
    for (std::size_t k = 0; k < n; ++k) y[k] = kLevels[std::min<std::size_t>(k / q, 3)];
    const std::vector<Plateau> p = find_plateaus(t, y, kRtol, default_min_duration(t));
    REQUIRE(p.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(p[i].first == i * q);
      CHECK(p[i].last == (i == 3 ? n - 1 : (i + 1) * q - 1));
      CHECK_THAT(p[i].value, Catch::Matchers::WithinAbs(kLevels[i], 1e-12));
    }
    const std::vector<double> m = merge_times(t, y, p);
    REQUIRE(m.size() == 3);
    for (std::size_t i = 0; i < 3; ++i)
      CHECK_THAT(m[i], Catch::Matchers::WithinAbs(kJumps[i] - 0.5 * (t[1] - t[0]), 1e-9));
  }
}

TEST_CASE("plateaus of a smooth (tanh) staircase: ends where the steps come within tol", "[plateaus]") {
  for (std::size_t n : {101, 801, 20001})
    for (double w : {0.5, 2.0}) {
      const std::vector<double> t = grid(n);
      std::vector<double> y;
      for (double x : t) y.push_back(tanh_staircase(x, w));
      check_tanh_staircase(t, y, w, 0.0);
    }
}

TEST_CASE("noise at a third of the tolerance: the same four plateaus and three merges", "[plateaus]") {
  // Bounded noise, uniform in [-tol/3, tol/3]: moves a half-window mean difference by at most 2 tol / 3 <
  // tol, so the levels stay flat; the bounds of check_tanh_staircase with a = tol / 3. (The detector
  // before issue 46 found 7 plateaus at 801 samples and 157 at 20001.)
  std::mt19937_64 rng(46);
  for (std::size_t n : {101, 801, 20001}) {
    const std::vector<double> t = grid(n);
    const double a = kRtol / 3;
    std::uniform_real_distribution<double> noise(-a, a);
    std::vector<double> y;
    for (double x : t) y.push_back(tanh_staircase(x, 0.5) + noise(rng));
    check_tanh_staircase(t, y, 0.5, a);
  }
  // Gaussian noise of standard deviation tol / 3 at 20001 samples: a half-window of D / 2 holds 200
  // samples, so a mean difference has a standard deviation of sigma / 10 = tol / 30: four plateaus, each
  // value within tol of its level, merges within 0.05 of the jumps.
  std::normal_distribution<double> gauss(0.0, kRtol / 3);
  const std::vector<double> t = grid(20001);
  std::vector<double> y;
  for (double x : t) y.push_back(tanh_staircase(x, 0.5) + gauss(rng));
  const std::vector<Plateau> p = find_plateaus(t, y, kRtol, default_min_duration(t));
  REQUIRE(p.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) CHECK(std::abs(p[i].value - kLevels[i]) <= kRtol);
  const std::vector<double> m = merge_times(t, y, p);
  REQUIRE(m.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(std::abs(m[i] - kJumps[i]) <= 0.05);
}

TEST_CASE("a ramp has no plateau at the default settings, at any sampling and rtol up to 0.02", "[plateaus]") {
  // y = t: its band of +-tol lasts 2 rtol x 100 <= 4 (the detector before issue 46 found 134 plateaus at
  // 801 samples); where it lasts D or more, its halves' medians differ by about tol > 0.75 tol.
  for (std::size_t n : {101, 801, 20001}) {
    const std::vector<double> t = grid(n);
    for (double rtol : {1e-3, 2e-3, 5e-3, 1e-2, 2e-2})
      CHECK(find_plateaus(t, t, rtol, default_min_duration(t)).empty());
  }
}

TEST_CASE("an exponential approach has a plateau only where it has come within tol of its limit", "[plateaus]") {
  for (std::size_t n : {101, 801, 20001}) {
    const std::vector<double> t = grid(n);
    const double dt = t[1] - t[0];
    // y = 1 - exp(-t / tau). tau = 100 / 3 and 50: at t = 100 still 25 and 68 tol from the limit (tol =
    // rtol x range): no plateau (the detector before issue 46 found 71 and 93 at 801 samples).
    for (double tau : {100.0 / 3, 50.0}) {
      std::vector<double> y;
      for (double x : t) y.push_back(1 - std::exp(-x / tau));
      CHECK(find_plateaus(t, y, kRtol, default_min_duration(t)).empty());
    }
    // tau = 10: within 0.02 tol at t = 100; one plateau, to the end. With d = exp(-t / tau) the distance
    // from the limit, decreasing: its median m lies between d(end) and d(start), its end is within tol of
    // it (m <= d(100) + tol), so is its start: d(start) <= 2 tol + d(100); the sample before it is not:
    // d > m + tol >= tol. tol = rtol (1 - e^-10). So tau ln(1 / (2 tol + d(100))) <= start <= tau ln(1 /
    // tol) + dt, and its value (a mean of samples with d <= d(start)) is within 2 tol + d(100) of 1.
    std::vector<double> y;
    for (double x : t) y.push_back(1 - std::exp(-x / 10));
    const double tol = kRtol * (y.back() - y.front());
    const std::vector<Plateau> p = find_plateaus(t, y, kRtol, default_min_duration(t));
    REQUIRE(p.size() == 1);
    CHECK(p[0].last == n - 1);
    const double d_end = std::exp(-10.0);
    CHECK(p[0].start >= 10 * std::log(1 / (2 * tol + d_end)) - 1e-9);
    CHECK(p[0].start <= 10 * std::log(1 / tol) + dt + 1e-9);
    CHECK(std::abs(p[0].value - 1) <= 2 * tol + d_end);
  }
}

TEST_CASE("a staircase ending in an exponential approach to its top level: four plateaus, three merges", "[plateaus]") {
  // 0 -> 0.3 -> 0.5 by tanh steps (w = 0.5) at 25 and 50, then from t = 75 y = 1 - 0.5 exp(-(t - 75) / 3).
  // The approach adds no plateau (the detector before issue 46 found 5 at 101 samples, 11 at 801). The
  // top plateau starts as in the test above, with d = 0.5 exp(-(t - 75) / 3): 75 + 3 ln(0.5 / (2 tol +
  // d(100))) <= start <= 75 + 3 ln(0.5 / tol) + dt, its value within 2 tol + d(100) of 1. The last merge
  // is where 0.5 exp(-(t - 75) / 3) = 1 - mid, mid within e = (tol + 2 tol + d(100)) / 2 of 0.75:
  // |merge - (75 + 3 ln 2)| <= 3 ln((0.25 + e) / (0.25 - e)); linear interpolation adds at most 0.12 dt^2
  // (y'' <= 0.5 / 9, so y is off by 0.0069 dt^2, against a slope >= 0.06 within a sample of the crossing).
  for (std::size_t n : {101, 801, 20001}) {
    const std::vector<double> t = grid(n);
    const double dt = t[1] - t[0], tau = 3;
    std::vector<double> y;
    for (double x : t)
      y.push_back(x < 75 ? 0.3 * 0.5 * (1 + std::tanh((x - 25) / 0.5)) + 0.2 * 0.5 * (1 + std::tanh((x - 50) / 0.5))
                         : 1 - 0.5 * std::exp(-(x - 75) / tau));
    const double tol = kRtol * (y.back() - y.front());  // y rises monotonically
    const std::vector<Plateau> p = find_plateaus(t, y, kRtol, default_min_duration(t));
    REQUIRE(p.size() == 4);
    const double d_end = 0.5 * std::exp(-25 / tau);
    for (std::size_t i = 0; i < 3; ++i) CHECK(std::abs(p[i].value - kLevels[i]) <= tol);
    CHECK(std::abs(p[3].value - 1) <= 2 * tol + d_end);
    CHECK(p[3].last == n - 1);
    CHECK(p[3].start >= 75 + tau * std::log(0.5 / (2 * tol + d_end)) - 1e-9);
    CHECK(p[3].start <= 75 + tau * std::log(0.5 / tol) + dt + 1e-9);
    const std::vector<double> m = merge_times(t, y, p);
    REQUIRE(m.size() == 3);
    CHECK(std::abs(m[0] - 25) <= 0.5 * std::atanh(2 * tol / 0.3) + dt * dt / 0.5);
    CHECK(std::abs(m[1] - 50) <= 0.5 * std::atanh(2 * tol / 0.2) + dt * dt / 0.5);
    const double e = 1.5 * tol + 0.5 * d_end;  // |mid - 0.75|: half of tol + (2 tol + d(100))
    CHECK(std::abs(m[2] - (75 + tau * std::log(2.0))) <= tau * std::log((0.25 + e) / (0.25 - e)) + 0.12 * dt * dt);
  }
}
