#include "kernel/ops/tangent_projection.hpp"

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

// ---- adjoint and tangent ----

template <class T>
MatrixT<T> tangent_backward(const MatrixT<T>& X, const MatrixT<T>& V, const MatrixT<T>& G, MatrixT<T>& dX) {
  MatrixT<T> dV = G;
  dX = MatrixT<T>::Zero(X.rows(), X.cols());
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    const T xx = X.row(i).squaredNorm();
    if (!(xx > T(0))) continue;
    const T c = V.row(i).dot(X.row(i)) / xx, e = G.row(i).dot(X.row(i)) / xx;
    dV.row(i) -= e * X.row(i);
    dX.row(i) = -c * G.row(i) - e * V.row(i) + (T(2) * c * e) * X.row(i);
  }
  return dV;
}

template <class T>
MatrixT<T> tangent_jvp(const MatrixT<T>& X, const MatrixT<T>& V, const MatrixT<T>& dX, const MatrixT<T>& dV) {
  MatrixT<T> dF = dV;
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    const T xx = X.row(i).squaredNorm();
    if (!(xx > T(0))) continue;
    const T c = V.row(i).dot(X.row(i)) / xx;
    const T dc = (dV.row(i).dot(X.row(i)) + V.row(i).dot(dX.row(i)) - T(2) * c * X.row(i).dot(dX.row(i))) / xx;
    dF.row(i) -= dc * X.row(i) + c * dX.row(i);
  }
  return dF;
}

#define RCSIM_TANGENT_OPS(T)                                                                                  \
  template MatrixT<T> tangent_backward<T>(const MatrixT<T>&, const MatrixT<T>&, const MatrixT<T>&, MatrixT<T>&); \
  template MatrixT<T> tangent_jvp<T>(const MatrixT<T>&, const MatrixT<T>&, const MatrixT<T>&, const MatrixT<T>&);
RCSIM_TANGENT_OPS(double)
RCSIM_TANGENT_OPS(float)
#undef RCSIM_TANGENT_OPS

}  // namespace rcsim
