// Exponential decay of a per-layer curve (collapse rates, SCIENCE.md 5.1): least squares of
// ln y against the layer on a window, the default window, the collapse depth, and the reported
// theory bound C (1 - eps^r)^(t/r).
#pragma once

#include <string>
#include <vector>

namespace rcsim {

// The straight line ln y = intercept + slope * t fitted by least squares.
struct LogLinearFit {
  double slope = 0.0;  // d ln y / dt per layer (negative = decay)
  double intercept = 0.0;
  double slope_stderr = 0.0;                   // standard error of the slope from the residuals (NaN for 2 points)
  double r2 = 0.0;                             // coefficient of determination (1 for an exact line)
  int points = 0;                              // layers in the window
  double first_layer = 0.0, last_layer = 0.0;  // the window actually used
  bool ok() const { return points >= 3; }
};

// Fit ln y on the points t[i], y[i] with i in [first, last] (indices, inclusive). Every y must
// be positive and finite. Fewer than 3 points: slope NaN, points = count.
LogLinearFit fit_log_linear(const std::vector<double>& t, const std::vector<double>& y, int first, int last);

// Relative value below which a curve is at the round-off floor of double precision.
constexpr double kRoundOffFloor = 1e-13;
// Fraction of the usable depth skipped as the transient by the default window.
constexpr double kTransientFraction = 0.1;

// Index range [first, last] of a fit window; first > last when empty.
struct FitWindow {
  int first = 0, last = -1;
};

// Last usable index: the one before the first index where y is not finite, y <= DBL_MIN (zero or
// underflow), or rel < kRoundOffFloor (rel = y relative to the token scale: mu_rel for mu, the
// curve itself for rank_one_residual). -1 if the first point is already unusable.
int last_usable_index(const std::vector<double>& y, const std::vector<double>& rel);

// The default window: from the first recorded layer >= t0 + max(1, ceil(kTransientFraction *
// (t_end - t0))) to t_end, where t0 = t[0] and t_end = t[last_usable_index]. That is: stop
// before underflow / round-off / non-finite values, and skip the first 10% of the usable depth
// (at least one layer) as the transient.
FitWindow default_window(const std::vector<double>& t, const std::vector<double>& y, const std::vector<double>& rel);

// The exponential phase, found in the curve itself (`rcsim analyze`'s default window, "auto"):
// among the windows [i, j] of recorded layers inside the usable range (last_usable_index: before
// underflow, the round-off floor, or non-finite values) with at least kAutoMinPoints points on
// which ln y is a straight line to the tolerance, the one that covers the most decay. Straight:
// the fit decays (slope < 0), has R^2 >= kAutoMinR2, and the slopes fitted on its two halves
// (indices i..mid, mid+1..j) differ by at most max(kAutoHalvesTolerance |slope|,
// kAutoHalvesZ sqrt(se1^2 + se2^2)) (se: the halves' standard errors: a noisy curve's halves may
// differ by their noise). Most decay: the largest -slope x (t_j - t_i), the e-folds along the
// fitted line (a long slow transient covers fewer e-folds than the collapse after it; a plateau
// none); ties: the higher R^2. A window must cover at least kAutoMinDecay e-folds (a flat
// curve's round-off is no decay). Curves with more than kAutoGrid usable points try window bounds
// on a grid of about kAutoGrid points (and the last usable point). `found` is false when no
// window qualifies (a flat or growing curve, noise): then the window is default_window().
constexpr double kAutoMinR2 = 0.98;
constexpr double kAutoHalvesTolerance = 0.1;
constexpr double kAutoHalvesZ = 3.0;
constexpr int kAutoMinPoints = 5;
constexpr double kAutoMinDecay = 1.0;
constexpr int kAutoGrid = 400;
struct ExponentialPhase {
  FitWindow window;
  bool found = false;
};
ExponentialPhase exponential_window(const std::vector<double>& t, const std::vector<double>& y,
                                    const std::vector<double>& rel);

// How well a fitted window is described by one rate: R^2 of the whole window and the decay rates
// (-slope) of its two halves (indices first..mid and mid+1..last, mid = (first + last) / 2;
// NaN when a half has fewer than 2 points). A fit is poor when R^2 < kPoorFitR2 or the halves'
// rates differ by more than kPoorFitHalves relative to the window's rate.
constexpr double kPoorFitR2 = 0.95;
constexpr double kPoorFitHalves = 0.3;
struct FitQuality {
  double first_half_rate = 0.0, second_half_rate = 0.0;
  double halves_difference = 0.0;  // |rate1 - rate2| / |rate of the window| (NaN if undefined)
  bool poor = false;
  std::string reason;  // "" or e.g. "R^2 = 0.83 < 0.95", "halves' rates 0.61 and 0.25 differ by 59%"
};
FitQuality fit_quality(const std::vector<double>& t, const std::vector<double>& y, const LogLinearFit& fit,
                       const FitWindow& w);

// A user window of layers [from, to] (inclusive, in layer units), cut at the first point where
// y is not finite or <= DBL_MIN (its logarithm is not usable).
FitWindow layer_window(const std::vector<double>& t, const std::vector<double>& y, double from, double to);

// First recorded layer t[i] with rel[i] < threshold; -1 if none (NaN values never count).
double collapse_depth(const std::vector<double>& t, const std::vector<double>& rel, double threshold);

// Decay rate per layer of the reported bound C (1 - eps^r)^(t/r): -ln(1 - eps^r) / r
// (0 for eps = 0; NaN for r < 1 (no centre node: the theorem does not apply) or eps outside [0, 1]).
double bound_rate(double eps, int radius);
// log10 of bound_rate, computed in log space so that it stays finite where eps^r underflows
// (eps = 1e-200, r = 3: the rate 3.3e-601 is 0 in double, its log10 -600.48 is not):
// for eps^r < 1e-12, -ln(1 - e) = e (1 + e/2 + ...) = e to 1e-12 relative, so
// log10 rate = r log10(eps) - log10(r). -inf for eps = 0, NaN where bound_rate is NaN.
double log10_bound_rate(double eps, int radius);
// The bound itself at layer t: C exp(-bound_rate * t).
double theory_bound(double C, double eps, int radius, double t);

}  // namespace rcsim
