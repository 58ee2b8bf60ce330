#include "model/unnormalised_attention.hpp"

#include <cmath>

namespace rcsim {

void usa_weights(Eigen::Ref<Matrix> S, const MaskMatrix& mask) {
  const double inv_n = 1.0 / static_cast<double>(S.rows());
  for (Eigen::Index j = 0; j < S.cols(); ++j)
    for (Eigen::Index i = 0; i < S.rows(); ++i) S(i, j) = mask(i, j) ? std::exp(S(i, j)) * inv_n : 0.0;
}

}  // namespace rcsim
