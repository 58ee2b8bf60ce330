// Metastability of a time series (docs/science/particles.md section 5): its plateaus and the
// merge times between them, the definition of analysis/metastability.py, for `rcsim analyze
// --plateaus=MEASURE` (docs/user/analysis.md).
//
// A plateau is a maximal run of samples k = s..e (at least two) whose values all lie within
// rtol x (range of the series) of the plateau's running mean, lasting at least min_duration in t;
// two consecutive plateaus are one (joined, value the duration-weighted mean) when their values
// differ by at most rtol x range (a blip between them), or when the second starts at the sample
// after the first ends, with a step of at most rtol x range there, and their values differ by at
// most 2 rtol x range (a drift, no transition between them). Between consecutive
// plateaus (values v1, v2) the merge time is where the series first crosses (v1 + v2) / 2, linearly
// interpolated (the midpoint of the step where it jumps across). An integer series (cluster counts)
// takes rtol = 0: the plateaus are the runs of equal values.
#pragma once

#include <cstddef>
#include <vector>

namespace rcsim {

struct Plateau {
  double start = 0, end = 0;           // t of its first and last sample
  double value = 0;                    // mean of its samples (joined: duration-weighted mean)
  std::size_t first = 0, last = 0;     // indices of its first and last sample
};

// The plateaus of y(t). t and y: the same length >= 1, finite; rtol and min_duration finite and >= 0.
// Throws std::invalid_argument otherwise (callers check their input and name it first).
std::vector<Plateau> find_plateaus(const std::vector<double>& t, const std::vector<double>& y, double rtol,
                                   double min_duration);

// The merge time between each two consecutive plateaus of `found` (from find_plateaus(t, y, ...)).
std::vector<double> merge_times(const std::vector<double>& t, const std::vector<double>& y,
                                const std::vector<Plateau>& found);

}  // namespace rcsim
