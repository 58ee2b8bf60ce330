#include "kernel/ops/softmax.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rcsim {

double hardmax_tie_tolerance(bool single) { return single ? 1e-5 : 1e-12; }

namespace {
template <class T>
void hardmax_impl(Eigen::Ref<MatrixT<T>> S, const MaskMatrix& mask) {
  const T tol = static_cast<T>(hardmax_tie_tolerance(sizeof(T) == sizeof(float)));
  for (Eigen::Index i = 0; i < S.rows(); ++i) {
    T m = -std::numeric_limits<T>::infinity();
    for (Eigen::Index j = 0; j < S.cols(); ++j)
      if (mask(i, j)) m = std::max(m, S(i, j));
    const T cut = m - tol * std::max(std::abs(m), T(1));  // S_ij >= m_i - tol max(|m_i|, 1)
    int count = 0;
    for (Eigen::Index j = 0; j < S.cols(); ++j) {
      const bool top = mask(i, j) && S(i, j) >= cut;
      count += top ? 1 : 0;
      S(i, j) = top ? T(1) : T(0);
    }
    if (count > 0) S.row(i) /= static_cast<T>(count);  // A_ij = 1 / |S_i|
  }
}

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

void hardmax_weights(Eigen::Ref<Matrix> S, const MaskMatrix& mask) { hardmax_impl<double>(S, mask); }
void hardmax_weights(Eigen::Ref<MatrixF> S, const MaskMatrix& mask) { hardmax_impl<float>(S, mask); }

namespace {

template <class T>
void masked_softmax_impl(Eigen::Ref<MatrixT<T>> S, const MaskMatrix& mask) {
  const Eigen::Index n = S.rows(), m = S.cols();  // m = n for self-attention
  for (Eigen::Index i = 0; i < n; ++i) {
    T row_max = -std::numeric_limits<T>::infinity();
    for (Eigen::Index j = 0; j < m; ++j)
      if (mask(i, j)) row_max = std::max(row_max, S(i, j));
    T sum = 0;
    for (Eigen::Index j = 0; j < m; ++j) {
      const T a = mask(i, j) ? std::exp(S(i, j) - row_max) : T(0);
      S(i, j) = a;
      sum += a;
    }
    // sum >= 1: the maximal allowed entry contributes exp(0) = 1.
    const T inv = T(1) / sum;
    for (Eigen::Index j = 0; j < m; ++j) S(i, j) *= inv;
  }
}


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

// d exp(S - c)/N = exp(S - c)/N dS on the allowed entries, exactly 0 off them: the same for every
// constant shift c (attention.usa_normalised), A being the shifted weights.
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

void masked_softmax(Eigen::Ref<Matrix> S, const MaskMatrix& mask) { masked_softmax_impl<double>(S, mask); }
void masked_softmax(Eigen::Ref<MatrixF> S, const MaskMatrix& mask) { masked_softmax_impl<float>(S, mask); }

#define RCSIM_SOFTMAX_OPS(T)                                                                           \
  template MatrixT<T> softmax_backward<T>(const MatrixT<T>&, const MatrixT<T>&, const MaskMatrix&); \
  template MatrixT<T> softmax_jvp<T>(const MatrixT<T>&, const MatrixT<T>&, const MaskMatrix&);      \
  template MatrixT<T> usa_backward<T>(const MatrixT<T>&, const MatrixT<T>&, const MaskMatrix&);     \
  template MatrixT<T> usa_jvp<T>(const MatrixT<T>&, const MatrixT<T>&, const MaskMatrix&);
RCSIM_SOFTMAX_OPS(double)
RCSIM_SOFTMAX_OPS(float)
#undef RCSIM_SOFTMAX_OPS

}  // namespace rcsim
