#include "kernel/ops/unnormalised_attention.hpp"

#include <cmath>

namespace rcsim {

namespace {
template <class T>
void usa_impl(Eigen::Ref<MatrixT<T>> S, const MaskMatrix& mask, double shift) {
  const T inv_n = T(1) / static_cast<T>(S.rows());
  const T c = static_cast<T>(shift);  // S - 0 is S exactly: the unshifted USA unchanged
  for (Eigen::Index j = 0; j < S.cols(); ++j)
    for (Eigen::Index i = 0; i < S.rows(); ++i) S(i, j) = mask(i, j) ? std::exp(S(i, j) - c) * inv_n : T(0);
}
}  // namespace

void usa_weights(Eigen::Ref<Matrix> S, const MaskMatrix& mask, double shift) { usa_impl<double>(S, mask, shift); }
void usa_weights(Eigen::Ref<MatrixF> S, const MaskMatrix& mask, double shift) { usa_impl<float>(S, mask, shift); }

}  // namespace rcsim
