// Metastability of a time series (docs/science/particles.md section 5): its plateaus and the
// merge times between them, the definition of analysis/metastability.py, for `rcsim analyze
// --plateaus=MEASURE` (docs/user/analysis.md, "Plateaus").
//
// tol = rtol x (range of the series), D = min_duration (default: kMinDurationFraction x the span of t).
// 1. Flat samples: sample k is flat when the mean of the samples in [t_k - D/2, t_k] and the mean of
//    those in [t_k, t_k + D/2] (each half holding sample k and at least its neighbour) differ by at
//    most tol: the local slope over a window of D stays below about 2 tol / D. Noise bounded by a
//    moves the difference by at most 2 a (and a median by a), so a level with noise below 3 tol / 8
//    is flat, within tol of its median and passes step 3's test (2 a <= 0.75 tol) whatever the sampling.
// 2. Each maximal run of flat samples (a core) is refined: trimmed at both ends to the samples within
//    tol of its median and extended over the adjacent samples within tol of it (never into the
//    previous plateau), the median recomputed, until the run no longer changes (at most kRefineRounds
//    rounds). The median: a blip inside the run does not move it.
// 3. The refined run is a plateau when it has at least two samples, lasts at least D (t of its last
//    sample - t of its first), and is a level rather than a slow trend: the medians of its halves in t
//    differ by at most kTrendFraction x tol (a trend crossing the band of +-tol differs by about tol).
//    So a ramp has none (its band lasts 2 rtol x span; where that reaches D, it is a trend), nor has
//    an exponential approach before it has come within about tol of its limit.
// 4. Consecutive plateaus whose values (the mean of their samples) differ by at most tol are one level
//    (a blip between them): joined, the value the mean of both plateaus' samples.
// The merge time between consecutive plateaus (values v1, v2, differing by more than tol) is where
// the series first crosses (v1 + v2) / 2 after the first, linearly interpolated. An integer series
// (cluster counts) takes rtol = 0: the plateaus are its runs of equal values (at D = 0 those of at
// least three samples, or two at an end of the series: a run's middle sample must be flat).
#pragma once

#include <cstddef>
#include <vector>

namespace rcsim {

struct Plateau {
  double start = 0, end = 0;        // t of its first and last sample
  double value = 0;                 // mean of its samples (joined: of both plateaus' samples)
  std::size_t first = 0, last = 0;  // indices of its first and last sample
};

// The default minimum duration, a fraction of the span of t: 2%.
constexpr double kMinDurationFraction = 0.02;
constexpr int kRefineRounds = 10;
constexpr double kTrendFraction = 0.75;

// kMinDurationFraction x (t.back() - t.front()); 0 for an empty t.
double default_min_duration(const std::vector<double>& t);

// The plateaus of y(t). t and y: the same length >= 1, finite, t non-decreasing; rtol and min_duration
// finite and >= 0. Throws std::invalid_argument otherwise (callers check their input and name it first).
std::vector<Plateau> find_plateaus(const std::vector<double>& t, const std::vector<double>& y, double rtol,
                                   double min_duration);

// The merge time between each two consecutive plateaus of `found` (from find_plateaus(t, y, ...)).
std::vector<double> merge_times(const std::vector<double>& t, const std::vector<double>& y,
                                const std::vector<Plateau>& found);

}  // namespace rcsim
