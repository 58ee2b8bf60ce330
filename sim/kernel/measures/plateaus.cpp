#include "kernel/measures/plateaus.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace rcsim {

namespace {

bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// The series with its prefix sums of y - y[0] (a constant or integer series sums exactly): the mean
// of samples a..b is y[0] + (sum[b + 1] - sum[a]) / (b - a + 1), in analysis/metastability.py too.
struct Series {
  const std::vector<double>& t;
  const std::vector<double>& y;
  double tol;
  std::vector<double> sum;
  Series(const std::vector<double>& t_, const std::vector<double>& y_, double tol_) : t(t_), y(y_), tol(tol_) {
    sum.assign(y.size() + 1, 0.0);
    for (std::size_t j = 0; j < y.size(); ++j) sum[j + 1] = sum[j] + (y[j] - y[0]);
  }
  double part(std::size_t a, std::size_t b) const { return sum[b + 1] - sum[a]; }  // sum of y - y[0] over a..b
  double mean(std::size_t a, std::size_t b) const { return y[0] + part(a, b) / static_cast<double>(b - a + 1); }
  bool near(std::size_t j, double level) const { return std::abs(y[j] - level) <= tol; }
  double median(std::size_t a, std::size_t b) const {
    std::vector<double> v(y.begin() + static_cast<long>(a), y.begin() + static_cast<long>(b) + 1);
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size();
    return m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
  }
};

// Sample k is flat when the mean over [t_k - D/2, t_k] and the mean over [t_k, t_k + D/2] (both with
// sample k, each with at least its neighbour) differ by at most tol.
std::vector<bool> flat_samples(const Series& s, double min_duration) {
  const std::vector<double>& t = s.t;
  const std::size_t n = t.size();
  std::vector<bool> flat(n, false);
  if (n < 2) return flat;
  std::size_t lo = 0, hi = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const double left = t[k] - 0.5 * min_duration, right = t[k] + 0.5 * min_duration;
    while (t[lo] < left) ++lo;                      // first sample with t >= t_k - D/2
    while (hi + 1 < n && t[hi + 1] <= right) ++hi;  // last sample with t <= t_k + D/2
    const std::size_t a = k > 0 ? std::min(lo, k - 1) : 0, b = k + 1 < n ? std::max(hi, k + 1) : n - 1;
    const double step = s.part(k, b) / static_cast<double>(b - k + 1) - s.part(a, k) / static_cast<double>(k - a + 1);
    flat[k] = std::abs(step) <= s.tol;
  }
  return flat;
}

struct Piece {
  std::size_t first, last;
  bool found;
};

// A core a..b refined into a plateau: trimmed to the samples within tol of its median, extended over the
// adjacent ones (not before `floor`), until it no longer changes. The median: a blip inside a core (a
// cluster count flickering for a sample) does not move it.
Piece refine(const Series& s, std::size_t a, std::size_t b, std::size_t floor) {
  const std::size_t n = s.y.size();
  for (int round = 0; round < kRefineRounds; ++round) {
    const double level = s.median(a, b);
    std::size_t a1 = a, b1 = b;
    while (a1 <= b1 && !s.near(a1, level)) ++a1;
    while (b1 > a1 && !s.near(b1, level)) --b1;
    if (a1 > b1 || !s.near(b1, level)) return {a, b, false};
    while (a1 > floor && s.near(a1 - 1, level)) --a1;
    while (b1 + 1 < n && s.near(b1 + 1, level)) ++b1;
    if (a1 == a && b1 == b) break;
    a = a1;
    b = b1;
  }
  return {a, b, true};
}

// The plateau a..b is a level, not a slow trend across its band: at least two samples, lasting at least
// D, and the medians of its halves in t (samples with t <= the middle, and with t >= it) differ by at
// most kTrendFraction x tol (a trend that traverses the band differs by about tol).
bool is_level(const Series& s, const Piece& p, double min_duration) {
  if (!p.found || p.last <= p.first || s.t[p.last] - s.t[p.first] < min_duration) return false;
  const double middle = 0.5 * (s.t[p.first] + s.t[p.last]);
  std::size_t i = p.first, j = p.last;
  while (i < p.last && s.t[i + 1] <= middle) ++i;   // the last sample of the first half
  while (j > p.first && s.t[j - 1] >= middle) --j;  // the first sample of the second half
  return std::abs(s.median(j, p.last) - s.median(p.first, i)) <= kTrendFraction * s.tol;
}

// Consecutive plateaus whose values differ by at most tol joined: the value the mean of both's samples.
std::vector<Plateau> join_equal(const Series& s, const std::vector<Piece>& pieces) {
  std::vector<Plateau> out;
  std::vector<std::pair<double, std::size_t>> sums;  // sum of y - y[0] and sample count of each plateau
  for (const Piece& p : pieces) {
    const double value = s.mean(p.first, p.last);
    const std::size_t count = p.last - p.first + 1;
    if (!out.empty() && std::abs(value - out.back().value) <= s.tol) {
      Plateau& q = out.back();
      sums.back().first += s.part(p.first, p.last);
      sums.back().second += count;
      q.value = s.y[0] + sums.back().first / static_cast<double>(sums.back().second);
      q.end = s.t[p.last];
      q.last = p.last;
      continue;
    }
    out.push_back({s.t[p.first], s.t[p.last], value, p.first, p.last});
    sums.emplace_back(s.part(p.first, p.last), count);
  }
  return out;
}

}  // namespace

double default_min_duration(const std::vector<double>& t) {
  return t.empty() ? 0.0 : kMinDurationFraction * (t.back() - t.front());
}

std::vector<Plateau> find_plateaus(const std::vector<double>& t, const std::vector<double>& y, double rtol,
                                   double min_duration) {
  if (t.size() != y.size() || y.empty())
    throw std::invalid_argument("find_plateaus: t and y must have the same length > 0 (" + std::to_string(t.size()) +
                                " and " + std::to_string(y.size()) + ")");
  if (!all_finite(t) || !all_finite(y)) throw std::invalid_argument("find_plateaus: t and y must be finite");
  if (!std::is_sorted(t.begin(), t.end())) throw std::invalid_argument("find_plateaus: t must be non-decreasing");
  if (!(std::isfinite(rtol) && rtol >= 0 && std::isfinite(min_duration) && min_duration >= 0))
    throw std::invalid_argument("find_plateaus: rtol and min_duration must be finite numbers >= 0");
  const auto [lo, hi] = std::minmax_element(y.begin(), y.end());
  const Series s(t, y, rtol * (*hi - *lo));
  const std::vector<bool> flat = flat_samples(s, min_duration);
  const std::size_t n = y.size();
  std::vector<Piece> pieces;
  std::size_t floor = 0;  // the first sample after the last plateau
  for (std::size_t k = 0; k < n; ++k) {
    if (!flat[k]) continue;
    std::size_t e = k;
    while (e + 1 < n && flat[e + 1]) ++e;  // the core k..e
    if (e >= floor) {
      const Piece p = refine(s, std::max(k, floor), e, floor);
      if (is_level(s, p, min_duration)) {
        pieces.push_back(p);
        floor = p.last + 1;
      }
    }
    k = e;
  }
  return join_equal(s, pieces);
}

std::vector<double> merge_times(const std::vector<double>& t, const std::vector<double>& y,
                                const std::vector<Plateau>& found) {
  std::vector<double> out;
  for (std::size_t i = 0; i + 1 < found.size(); ++i) {
    const Plateau &a = found[i], &b = found[i + 1];
    if (!(b.first > a.last && b.first < y.size() && y.size() == t.size()))
      throw std::invalid_argument("merge_times: plateaus out of order or not of this series");
    const double mid = 0.5 * (a.value + b.value);
    const double sign = b.value > a.value ? 1.0 : (b.value < a.value ? -1.0 : 0.0);
    std::size_t k = a.last;
    while (k < b.first && sign * (y[k + 1] - mid) < 0) ++k;  // the step where y crosses the midpoint
    k = std::min(k, b.first - 1);
    const double y0 = y[k], y1 = y[k + 1];
    const double frac = y1 == y0 ? 0.5 : std::min(std::max((mid - y0) / (y1 - y0), 0.0), 1.0);
    out.push_back(t[k] + frac * (t[k + 1] - t[k]));
  }
  return out;
}

}  // namespace rcsim
