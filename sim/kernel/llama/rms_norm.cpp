#include "kernel/llama/rms_norm.hpp"

namespace rcsim::llama {

template <class T>
MatrixT<T> rms_norm(const MatrixT<T>& X, const VectorT<T>& gain, double eps) {
  const VectorT<T> mean_square = X.rowwise().squaredNorm() / static_cast<T>(X.cols());
  const VectorT<T> scale = (mean_square.array() + static_cast<T>(eps)).rsqrt().matrix();
  return (scale.asDiagonal() * X) * gain.asDiagonal();
}

template MatrixT<double> rms_norm(const MatrixT<double>&, const VectorT<double>&, double);
template MatrixT<float> rms_norm(const MatrixT<float>&, const VectorT<float>&, double);

}  // namespace rcsim::llama
