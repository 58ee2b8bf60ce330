// Ensemble statistics across trials (SCIENCE.md section 4, last item).
#pragma once

#include <vector>

#include "kernel/support/types.hpp"

namespace rcsim {

// Quantile q in [0, 1] of the non-NaN values, by linear interpolation between order statistics
// (NumPy's default "linear" method). NaN when every value is NaN.
double quantile(std::vector<double> values, double q);

struct ColumnStats {
  Vector mean, median, q10, q90;
};
// Statistics of each column of M (trials x layers) over its rows, ignoring NaN.
ColumnStats column_stats(const Eigen::Ref<const Matrix>& M);

}  // namespace rcsim
