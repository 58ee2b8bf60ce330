#include "kernel/measures/decay_fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

namespace {

// Least-squares lines on any index range in O(1), from prefix sums of t, ln y and their products
// (centred on the range's first layer for accuracy at large layer numbers).
class PrefixFits {
 public:
  PrefixFits(const std::vector<double>& t, const std::vector<double>& y, int last) : t0_(t.empty() ? 0.0 : t[0]) {
    const auto n = static_cast<std::size_t>(last + 1);
    st_.assign(n + 1, 0.0);
    sy_ = stt_ = sty_ = syy_ = st_;
    for (std::size_t i = 0; i < n; ++i) {
      const double a = t[i] - t0_, b = std::log(y[i]);
      st_[i + 1] = st_[i] + a;
      sy_[i + 1] = sy_[i] + b;
      stt_[i + 1] = stt_[i] + a * a;
      sty_[i + 1] = sty_[i] + a * b;
      syy_[i + 1] = syy_[i] + b * b;
    }
  }
  // Slope, R^2 and the slope's standard error (0 for 2 points) on indices [i, j] (j - i >= 1).
  void fit(int i, int j, double& slope, double& r2, double& stderr_slope) const {
    const auto a = static_cast<std::size_t>(i), b = static_cast<std::size_t>(j) + 1;
    const double n = static_cast<double>(b - a);
    const double St = st_[b] - st_[a], Sy = sy_[b] - sy_[a];
    const double ctt = (stt_[b] - stt_[a]) - St * St / n, cty = (sty_[b] - sty_[a]) - St * Sy / n,
                 cyy = (syy_[b] - syy_[a]) - Sy * Sy / n;
    slope = ctt > 0 ? cty / ctt : std::numeric_limits<double>::quiet_NaN();
    r2 = cyy > 0 ? std::min(1.0, cty * cty / (ctt * cyy)) : 1.0;
    stderr_slope = n > 2 && ctt > 0 ? std::sqrt(std::max(0.0, cyy - slope * cty) / (n - 2) / ctt) : 0.0;
  }

 private:
  double t0_;
  std::vector<double> st_, sy_, stt_, sty_, syy_;
};

double halves_difference(double s1, double s2, double s) { return std::fabs(s1 - s2) / std::fabs(s); }

}  // namespace

ExponentialPhase exponential_window(const std::vector<double>& t, const std::vector<double>& y,
                                    const std::vector<double>& rel) {
  ExponentialPhase out;
  const int end = last_usable_index(y, rel);
  if (end + 1 < kAutoMinPoints) {
    out.window = default_window(t, y, rel);
    return out;
  }
  const PrefixFits fits(t, y, end);
  const int step = std::max(1, (end + 1) / kAutoGrid);
  std::vector<int> ends;
  for (int j = end; j >= 0; j -= step) ends.push_back(j);  // descending, the last usable point first
  double best_score = -1.0, best_r2 = -1.0;
  for (int i = 0; i + kAutoMinPoints - 1 <= end; i += step) {
    for (const int j : ends) {
      if (j - i + 1 < kAutoMinPoints) break;
      double slope = 0, r2 = 0, se = 0;
      fits.fit(i, j, slope, r2, se);
      if (!(slope < 0) || r2 < kAutoMinR2) continue;
      // The decay the window covers, in e-folds: -slope x span.
      const double score = -slope * (t[static_cast<std::size_t>(j)] - t[static_cast<std::size_t>(i)]);
      if (score < kAutoMinDecay || score < best_score || (score == best_score && r2 <= best_r2)) continue;
      const int mid = (i + j) / 2;
      double s1 = 0, s2 = 0, e1 = 0, e2 = 0, unused = 0;
      fits.fit(i, mid, s1, unused, e1);
      fits.fit(mid + 1, j, s2, unused, e2);
      // The halves agree to kAutoHalvesTolerance of the slope, or within the noise.
      const double allowed = std::max(kAutoHalvesTolerance * std::fabs(slope), kAutoHalvesZ * std::hypot(e1, e2));
      if (!(std::fabs(s1 - s2) <= allowed)) continue;
      best_score = score;
      best_r2 = r2;
      out.window = {i, j};
      out.found = true;
    }
  }
  if (!out.found) out.window = default_window(t, y, rel);
  return out;
}

FitQuality fit_quality(const std::vector<double>& t, const std::vector<double>& y, const LogLinearFit& fit,
                       const FitWindow& w) {
  FitQuality q;
  const int mid = (w.first + w.last) / 2;
  const LogLinearFit a = fit_log_linear(t, y, w.first, mid), b = fit_log_linear(t, y, mid + 1, w.last);
  // Two points make a line too: the halves need only 2 each.
  auto slope2 = [&](const LogLinearFit& f, int first, int last) {
    if (f.points >= 3) return f.slope;
    if (f.points == 2)
      return (std::log(y[static_cast<std::size_t>(last)]) - std::log(y[static_cast<std::size_t>(first)])) /
             (t[static_cast<std::size_t>(last)] - t[static_cast<std::size_t>(first)]);
    return kNaN;
  };
  q.first_half_rate = -slope2(a, w.first, mid);
  q.second_half_rate = -slope2(b, mid + 1, w.last);
  q.halves_difference = halves_difference(q.first_half_rate, q.second_half_rate, fit.slope);
  char buf[160];
  if (!fit.ok()) return q;
  if (fit.r2 < kPoorFitR2) {
    std::snprintf(buf, sizeof buf, "R^2 = %.3g < %.3g", fit.r2, kPoorFitR2);
    q.reason = buf;
  } else if (q.halves_difference > kPoorFitHalves) {
    std::snprintf(buf, sizeof buf, "the halves' rates %.3g and %.3g differ by %.0f%%", q.first_half_rate,
                  q.second_half_rate, 100 * q.halves_difference);
    q.reason = buf;
  }
  q.poor = !q.reason.empty();
  return q;
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
