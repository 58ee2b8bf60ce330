#include "kernel/ops/softmax.hpp"

namespace rcsim {

namespace {

// A .* M restricted to the mask, and A .* (M - rowsum(A .* M)) there: the softmax's map, which is
// symmetric (its own adjoint).
template <class T>
MatrixT<T> softmax_map(const MatrixT<T>& A, const MatrixT<T>& M, const MaskMatrix& mask) {
  using Arr = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic>;
  const Arr allowed = mask.template cast<T>().array();
  const Arr AM = allowed * A.array() * M.array();
  const Eigen::Array<T, Eigen::Dynamic, 1> dot = AM.rowwise().sum();
  return (AM - allowed * A.array() * dot.replicate(1, A.cols())).matrix();
}

template <class T>
MatrixT<T> usa_map(const MatrixT<T>& A, const MatrixT<T>& M, const MaskMatrix& mask) {
  return (mask.template cast<T>().array() * A.array() * M.array()).matrix();
}

}  // namespace

template <class T>
MatrixT<T> softmax_backward(const MatrixT<T>& A, const MatrixT<T>& dA, const MaskMatrix& mask) {
  return softmax_map<T>(A, dA, mask);
}
template <class T>
MatrixT<T> softmax_jvp(const MatrixT<T>& A, const MatrixT<T>& dS, const MaskMatrix& mask) {
  return softmax_map<T>(A, dS, mask);
}
template <class T>
MatrixT<T> usa_backward(const MatrixT<T>& A, const MatrixT<T>& dA, const MaskMatrix& mask) {
  return usa_map<T>(A, dA, mask);
}
template <class T>
MatrixT<T> usa_jvp(const MatrixT<T>& A, const MatrixT<T>& dS, const MaskMatrix& mask) {
  return usa_map<T>(A, dS, mask);
}

#define RCSIM_SOFTMAX_OPS(T)                                                                           \
  template MatrixT<T> softmax_backward<T>(const MatrixT<T>&, const MatrixT<T>&, const MaskMatrix&); \
  template MatrixT<T> softmax_jvp<T>(const MatrixT<T>&, const MatrixT<T>&, const MaskMatrix&);      \
  template MatrixT<T> usa_backward<T>(const MatrixT<T>&, const MatrixT<T>&, const MaskMatrix&);     \
  template MatrixT<T> usa_jvp<T>(const MatrixT<T>&, const MatrixT<T>&, const MaskMatrix&);
RCSIM_SOFTMAX_OPS(double)
RCSIM_SOFTMAX_OPS(float)
#undef RCSIM_SOFTMAX_OPS

}  // namespace rcsim
