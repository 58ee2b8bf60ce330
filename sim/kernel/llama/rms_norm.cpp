#include "kernel/llama/rms_norm.hpp"

namespace rcsim::llama {

template <class T>
MatrixT<T> rms_norm(const MatrixT<T>& X, const VectorT<T>& gain, double eps, VectorT<T>* rstd) {
  const VectorT<T> mean_square = X.rowwise().squaredNorm() / static_cast<T>(X.cols());
  const VectorT<T> scale = (mean_square.array() + static_cast<T>(eps)).rsqrt().matrix();
  if (rstd) *rstd = scale;
  return (scale.asDiagonal() * X) * gain.asDiagonal();
}

namespace {
// dx = r e - (r^3 / d) (x . e) x for each row (e the rows of E): the Jacobian of x r, transposed
// or not (it is symmetric).
template <class T>
MatrixT<T> scale_jacobian(const MatrixT<T>& X, const VectorT<T>& rstd, const MatrixT<T>& E) {
  const VectorT<T> xe = X.cwiseProduct(E).rowwise().sum();
  const VectorT<T> coef = (rstd.array().cube() * xe.array() / static_cast<T>(X.cols())).matrix();
  return rstd.asDiagonal() * E - coef.asDiagonal() * X;
}
}  // namespace

template <class T>
MatrixT<T> rms_norm_backward(const MatrixT<T>& X, const VectorT<T>& gain, const VectorT<T>& rstd, const MatrixT<T>& dY,
                             VectorT<T>& dgain) {
  if (dgain.size() == 0) dgain = VectorT<T>::Zero(X.cols());
  dgain += (rstd.asDiagonal() * X).cwiseProduct(dY).colwise().sum().transpose();
  return scale_jacobian<T>(X, rstd, dY * gain.asDiagonal());
}

template <class T>
MatrixT<T> rms_norm_tangent(const MatrixT<T>& X, const VectorT<T>& gain, const VectorT<T>& rstd, const MatrixT<T>& dX) {
  return scale_jacobian<T>(X, rstd, dX) * gain.asDiagonal();
}

template MatrixT<double> rms_norm(const MatrixT<double>&, const VectorT<double>&, double, VectorT<double>*);
template MatrixT<float> rms_norm(const MatrixT<float>&, const VectorT<float>&, double, VectorT<float>*);
template MatrixT<double> rms_norm_backward(const MatrixT<double>&, const VectorT<double>&, const VectorT<double>&,
                                           const MatrixT<double>&, VectorT<double>&);
template MatrixT<double> rms_norm_tangent(const MatrixT<double>&, const VectorT<double>&, const VectorT<double>&,
                                          const MatrixT<double>&);
template MatrixT<float> rms_norm_backward(const MatrixT<float>&, const VectorT<float>&, const VectorT<float>&,
                                          const MatrixT<float>&, VectorT<float>&);

}  // namespace rcsim::llama
