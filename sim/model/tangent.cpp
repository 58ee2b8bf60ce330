#include "model/tangent.hpp"

namespace rcsim {

void project_tangent(const Eigen::Ref<const Matrix>& X, Eigen::Ref<Matrix> V) {
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    const double xx = X.row(i).squaredNorm();
    if (xx > 0.0) V.row(i) -= (V.row(i).dot(X.row(i)) / xx) * X.row(i);
  }
}

}  // namespace rcsim
