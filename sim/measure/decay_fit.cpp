#include "measure/decay_fit.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rcsim {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
bool usable(double y) { return std::isfinite(y) && y > std::numeric_limits<double>::min(); }
}  // namespace

LogLinearFit fit_log_linear(const std::vector<double>& t, const std::vector<double>& y, int first, int last) {
  LogLinearFit f;
  first = std::max(first, 0);
  last = std::min(last, static_cast<int>(std::min(t.size(), y.size())) - 1);
  f.points = std::max(0, last - first + 1);
  f.slope = f.intercept = f.slope_stderr = f.r2 = kNaN;
  if (f.points == 0) return f;
  f.first_layer = t[static_cast<std::size_t>(first)];
  f.last_layer = t[static_cast<std::size_t>(last)];
  if (f.points < 3) return f;
  // Centred sums (numerically stable for large layer numbers).
  const double n = f.points;
  double mt = 0, my = 0;
  for (int i = first; i <= last; ++i) {
    mt += t[static_cast<std::size_t>(i)] / n;
    my += std::log(y[static_cast<std::size_t>(i)]) / n;
  }
  double stt = 0, sty = 0, syy = 0;
  for (int i = first; i <= last; ++i) {
    const double dt = t[static_cast<std::size_t>(i)] - mt, dy = std::log(y[static_cast<std::size_t>(i)]) - my;
    stt += dt * dt;
    sty += dt * dy;
    syy += dy * dy;
  }
  f.slope = sty / stt;
  f.intercept = my - f.slope * mt;
  const double ss_res = std::max(0.0, syy - f.slope * sty);
  f.r2 = syy > 0 ? 1.0 - ss_res / syy : 1.0;
  f.slope_stderr = std::sqrt(ss_res / (n - 2.0) / stt);
  return f;
}

int last_usable_index(const std::vector<double>& y, const std::vector<double>& rel) {
  const int n = static_cast<int>(std::min(y.size(), rel.size()));
  for (int i = 0; i < n; ++i) {
    const double r = rel[static_cast<std::size_t>(i)];
    if (!usable(y[static_cast<std::size_t>(i)]) || !(r >= kRoundOffFloor)) return i - 1;
  }
  return n - 1;
}

FitWindow default_window(const std::vector<double>& t, const std::vector<double>& y, const std::vector<double>& rel) {
  FitWindow w;
  const int end = last_usable_index(y, rel);
  if (end < 0) return w;
  const double t0 = t[0], t_end = t[static_cast<std::size_t>(end)];
  const double skip = std::max(1.0, std::ceil(kTransientFraction * (t_end - t0)));
  w.first = end + 1;
  for (int i = 0; i <= end; ++i)
    if (t[static_cast<std::size_t>(i)] >= t0 + skip) {
      w.first = i;
      break;
    }
  w.last = end;
  return w;
}

FitWindow layer_window(const std::vector<double>& t, const std::vector<double>& y, double from, double to) {
  FitWindow w;
  const int n = static_cast<int>(std::min(t.size(), y.size()));
  w.first = n;
  for (int i = 0; i < n; ++i)
    if (t[static_cast<std::size_t>(i)] >= from) {
      w.first = i;
      break;
    }
  w.last = w.first - 1;
  for (int i = w.first; i < n && t[static_cast<std::size_t>(i)] <= to; ++i) {
    if (!usable(y[static_cast<std::size_t>(i)])) break;
    w.last = i;
  }
  return w;
}

double collapse_depth(const std::vector<double>& t, const std::vector<double>& rel, double threshold) {
  for (std::size_t i = 0; i < std::min(t.size(), rel.size()); ++i)
    if (rel[i] < threshold) return t[i];
  return -1.0;
}

double bound_rate(double eps, int radius) {
  if (radius < 1 || !(eps >= 0.0 && eps <= 1.0)) return kNaN;
  const double e = std::pow(eps, radius);
  if (e >= 1.0) return std::numeric_limits<double>::infinity();
  return -std::log1p(-e) / radius;
}

double log10_bound_rate(double eps, int radius) {
  if (radius < 1 || !(eps >= 0.0 && eps <= 1.0)) return kNaN;
  if (eps == 0.0) return -std::numeric_limits<double>::infinity();
  const double log10_e = radius * std::log10(eps);  // log10 of eps^r, finite for every eps > 0
  if (log10_e < -12.0) return log10_e - std::log10(static_cast<double>(radius));
  return std::log10(bound_rate(eps, radius));
}

double theory_bound(double C, double eps, int radius, double t) { return C * std::exp(-bound_rate(eps, radius) * t); }

}  // namespace rcsim
