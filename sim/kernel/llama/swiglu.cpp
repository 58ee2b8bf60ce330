#include "kernel/llama/swiglu.hpp"

namespace rcsim::llama {

template <class T>
MatrixT<T> swiglu(const MatrixT<T>& X, const MatrixT<T>& w1, const MatrixT<T>& w2, const MatrixT<T>& w3) {
  const MatrixT<T> a = X * w1.transpose();
  const MatrixT<T> gate = (a.array() / (static_cast<T>(1) + (-a.array()).exp())).matrix();
  const MatrixT<T> h = (gate.array() * (X * w3.transpose()).array()).matrix();
  return h * w2.transpose();
}

template MatrixT<double> swiglu(const MatrixT<double>&, const MatrixT<double>&, const MatrixT<double>&,
                                const MatrixT<double>&);
template MatrixT<float> swiglu(const MatrixT<float>&, const MatrixT<float>&, const MatrixT<float>&,
                               const MatrixT<float>&);

}  // namespace rcsim::llama
