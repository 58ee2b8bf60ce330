#include "kernel/measures/attention_products.hpp"

#include <algorithm>

namespace rcsim {

double ergodicity_coefficient(const Eigen::Ref<const Matrix>& P) {
  double worst = 0.0;
  for (Eigen::Index i = 0; i < P.rows(); ++i)
    for (Eigen::Index j = i + 1; j < P.rows(); ++j) worst = std::max(worst, (P.row(i) - P.row(j)).cwiseAbs().sum());
  return 0.5 * worst;
}

}  // namespace rcsim
