#include "kernel/measures/plateaus.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace rcsim {

namespace {

// Consecutive plateaus that are one level are joined (issue 37: particles_staircase2000.py's first
// plateau was split in two, with a merge reported between them): their values differ by at most
// `tol` (a blip or a short excursion between them), or the second starts at the sample after the
// first ends, with a step of at most `tol` there, and their values differ by at most 2 tol (no
// transition between them: a drift moved the running mean out of the tolerance; a linear drift
// splits a level into pieces whose means differ by at most 2 tol). The joined value is the
// duration-weighted mean (sample-weighted where both last no time).
std::vector<Plateau> join_equal(const std::vector<Plateau>& found, double tol, const std::vector<double>& y) {
  std::vector<Plateau> out;
  for (const Plateau& p : found) {
    const bool joined = !out.empty() && [&] {
      const Plateau& q = out.back();
      const double gap = std::abs(p.value - q.value);
      const bool drift = p.first == q.last + 1 && std::abs(y[p.first] - y[q.last]) <= tol && gap <= 2 * tol;
      return gap <= tol || drift;
    }();
    if (!joined) {
      out.push_back(p);
      continue;
    }
    Plateau& q = out.back();
    double wq = q.end - q.start, wp = p.end - p.start;
    if (wq + wp <= 0) {
      wq = static_cast<double>(q.last - q.first + 1);
      wp = static_cast<double>(p.last - p.first + 1);
    }
    q.value = (wq * q.value + wp * p.value) / (wq + wp);
    q.end = p.end;
    q.last = p.last;
  }
  return out;
}

bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

}  // namespace

std::vector<Plateau> find_plateaus(const std::vector<double>& t, const std::vector<double>& y, double rtol,
                                   double min_duration) {
  if (t.size() != y.size() || y.empty())
    throw std::invalid_argument("find_plateaus: t and y must have the same length > 0 (" + std::to_string(t.size()) +
                                " and " + std::to_string(y.size()) + ")");
  if (!all_finite(t) || !all_finite(y)) throw std::invalid_argument("find_plateaus: t and y must be finite");
  if (!(std::isfinite(rtol) && rtol >= 0 && std::isfinite(min_duration) && min_duration >= 0))
    throw std::invalid_argument("find_plateaus: rtol and min_duration must be finite numbers >= 0");
  const auto [lo, hi] = std::minmax_element(y.begin(), y.end());
  const double tol = rtol * (*hi - *lo);
  const std::size_t n = y.size();
  std::vector<Plateau> out;
  std::size_t s = 0;
  double total = y[0];
  for (std::size_t k = 1; k <= n; ++k) {
    const double mean = total / static_cast<double>(k - s);
    if (k < n && std::abs(y[k] - mean) <= tol) {  // |y_k - running mean of the plateau| <= rtol x range
      total += y[k];
      continue;
    }
    if (t[k - 1] - t[s] >= min_duration && k - 1 > s) out.push_back({t[s], t[k - 1], mean, s, k - 1});
    if (k < n) {
      s = k;
      total = y[k];
    }
  }
  return join_equal(out, tol, y);
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
