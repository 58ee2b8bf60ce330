#include "kernel/measures/summary.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rcsim {

double quantile(std::vector<double> values, double q) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double x) { return std::isnan(x); }),
               values.end());
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  if (frac == 0.0) return values[lo];
  return values[lo] + frac * (values[hi] - values[lo]);
}

ColumnStats column_stats(const Eigen::Ref<const Matrix>& M) {
  const Eigen::Index cols = M.cols();
  ColumnStats s{Vector(cols), Vector(cols), Vector(cols), Vector(cols)};
  for (Eigen::Index j = 0; j < cols; ++j) {
    std::vector<double> v;
    double sum = 0.0;
    for (Eigen::Index i = 0; i < M.rows(); ++i) {
      if (std::isnan(M(i, j))) continue;
      v.push_back(M(i, j));
      sum += M(i, j);
    }
    s.mean(j) = v.empty() ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(v.size());
    s.median(j) = quantile(v, 0.5);
    s.q10(j) = quantile(v, 0.1);
    s.q90(j) = quantile(v, 0.9);
  }
  return s;
}

}  // namespace rcsim
