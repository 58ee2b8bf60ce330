#include "kernel/tangent.hpp"

namespace rcsim {

namespace {
template <class T>
void tangent_impl(const Eigen::Ref<const MatrixT<T>>& X, Eigen::Ref<MatrixT<T>> V) {
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    const T xx = X.row(i).squaredNorm();
    if (xx > T(0)) V.row(i) -= (V.row(i).dot(X.row(i)) / xx) * X.row(i);
  }
}
}  // namespace

void project_tangent(const Eigen::Ref<const Matrix>& X, Eigen::Ref<Matrix> V) { tangent_impl<double>(X, V); }
void project_tangent(const Eigen::Ref<const MatrixF>& X, Eigen::Ref<MatrixF> V) { tangent_impl<float>(X, V); }

}  // namespace rcsim
