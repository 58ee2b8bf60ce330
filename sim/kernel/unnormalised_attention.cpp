#include "kernel/unnormalised_attention.hpp"

#include <cmath>

namespace rcsim {

namespace {
template <class T>
void usa_impl(Eigen::Ref<MatrixT<T>> S, const MaskMatrix& mask) {
  const T inv_n = T(1) / static_cast<T>(S.rows());
  for (Eigen::Index j = 0; j < S.cols(); ++j)
    for (Eigen::Index i = 0; i < S.rows(); ++i) S(i, j) = mask(i, j) ? std::exp(S(i, j)) * inv_n : T(0);
}
}  // namespace

void usa_weights(Eigen::Ref<Matrix> S, const MaskMatrix& mask) { usa_impl<double>(S, mask); }
void usa_weights(Eigen::Ref<MatrixF> S, const MaskMatrix& mask) { usa_impl<float>(S, mask); }

}  // namespace rcsim
