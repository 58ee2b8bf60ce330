#include "kernel/llama/swiglu.hpp"

namespace rcsim::llama {

template <class T>
MatrixT<T> swiglu(const MatrixT<T>& X, const MatrixT<T>& w1, const MatrixT<T>& w2, const MatrixT<T>& w3,
                  SwigluCacheT<T>* cache) {
  const MatrixT<T> a = X * w1.transpose();
  const MatrixT<T> gate = (a.array() / (static_cast<T>(1) + (-a.array()).exp())).matrix();
  const MatrixT<T> u = X * w3.transpose();
  const MatrixT<T> h = (gate.array() * u.array()).matrix();
  if (cache) *cache = {a, u, gate};
  return h * w2.transpose();
}

namespace {
// silu'(a) = sigma(a) (1 + a (1 - sigma(a))), entry by entry.
template <class T>
MatrixT<T> silu_derivative(const MatrixT<T>& a) {
  const auto sigma = (static_cast<T>(1) + (-a.array()).exp()).inverse();
  return (sigma * (static_cast<T>(1) + a.array() * (static_cast<T>(1) - sigma))).matrix();
}

template <class T>
void add_to(MatrixT<T>& into, const MatrixT<T>& value) {
  if (into.size() == 0) into = MatrixT<T>::Zero(value.rows(), value.cols());
  into += value;
}
}  // namespace

template <class T>
MatrixT<T> swiglu_backward(const MatrixT<T>& X, const MatrixT<T>& w1, const MatrixT<T>& w2, const MatrixT<T>& w3,
                           const SwigluCacheT<T>& c, const MatrixT<T>& dOut, SwigluGradsT<T>& g) {
  const MatrixT<T> h = c.gate.cwiseProduct(c.u);
  add_to<T>(g.w2, dOut.transpose() * h);
  const MatrixT<T> dh = dOut * w2;
  const MatrixT<T> da = dh.cwiseProduct(c.u).cwiseProduct(silu_derivative<T>(c.a));
  const MatrixT<T> du = dh.cwiseProduct(c.gate);
  add_to<T>(g.w1, da.transpose() * X);
  add_to<T>(g.w3, du.transpose() * X);
  return da * w1 + du * w3;
}

template <class T>
MatrixT<T> swiglu_tangent(const MatrixT<T>& w1, const MatrixT<T>& w2, const MatrixT<T>& w3, const SwigluCacheT<T>& c,
                          const MatrixT<T>& dX) {
  const MatrixT<T> da = dX * w1.transpose(), du = dX * w3.transpose();
  const MatrixT<T> dh = silu_derivative<T>(c.a).cwiseProduct(da).cwiseProduct(c.u) + c.gate.cwiseProduct(du);
  return dh * w2.transpose();
}

template MatrixT<double> swiglu(const MatrixT<double>&, const MatrixT<double>&, const MatrixT<double>&,
                                const MatrixT<double>&, SwigluCacheT<double>*);
template MatrixT<float> swiglu(const MatrixT<float>&, const MatrixT<float>&, const MatrixT<float>&,
                               const MatrixT<float>&, SwigluCacheT<float>*);
template MatrixT<double> swiglu_backward(const MatrixT<double>&, const MatrixT<double>&, const MatrixT<double>&,
                                         const MatrixT<double>&, const SwigluCacheT<double>&, const MatrixT<double>&,
                                         SwigluGradsT<double>&);
template MatrixT<double> swiglu_tangent(const MatrixT<double>&, const MatrixT<double>&, const MatrixT<double>&,
                                        const SwigluCacheT<double>&, const MatrixT<double>&);
template MatrixT<float> swiglu_backward(const MatrixT<float>&, const MatrixT<float>&, const MatrixT<float>&,
                                        const MatrixT<float>&, const SwigluCacheT<float>&, const MatrixT<float>&,
                                        SwigluGradsT<float>&);

}  // namespace rcsim::llama
