#include "kernel/ops/mlp.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace rcsim {


namespace {

template <class T>
T activation(T z, MlpActivation a) {
  switch (a) {
    case MlpActivation::relu: return z > T(0) ? z : T(0);
    case MlpActivation::gelu: return T(0.5) * z * (T(1) + std::erf(z * T(0.70710678118654752440)));
    case MlpActivation::gelu_tanh:
      return T(0.5) * z * (T(1) + std::tanh(T(0.79788456080286535588) * (z + T(0.044715) * z * z * z)));
    case MlpActivation::tanh: return std::tanh(z);
    case MlpActivation::swiglu: return z / (T(1) + std::exp(-z));  // silu, times the gate (forward_impl)
  }
  return z;
}

// swiglu's gate matrix, checked: d x m beside W_in.
template <class T>
const MatrixT<T>& gate_of(const LayerWeightsT<T>& w) {
  if (w.mlp_gate.rows() != w.mlp_in.rows() || w.mlp_gate.cols() != w.mlp_in.cols())
    throw std::invalid_argument("mlp: mlp.activation = swiglu needs the gate W_gate (LayerWeights::mlp_gate) of W_in's "
                                "shape " + std::to_string(w.mlp_in.rows()) + " x " + std::to_string(w.mlp_in.cols()) +
                                ", got " + std::to_string(w.mlp_gate.rows()) + " x " + std::to_string(w.mlp_gate.cols()));
  return w.mlp_gate;
}

template <class T>
void forward_impl(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, MlpActivation a,
                  MlpWorkspaceT<T>& ws, MatrixT<T>& out, MlpCacheT<T>* cache) {
  ws.hidden.noalias() = X * w.mlp_in;
  if (w.mlp_in_bias.size()) ws.hidden.rowwise() += w.mlp_in_bias;
  if (cache) cache->pre = ws.hidden;
  ws.hidden = ws.hidden.unaryExpr([a](T z) { return activation<T>(z, a); });
  if (a == MlpActivation::swiglu) {  // silu(Z) .* (X W_gate)
    ws.gate.noalias() = X * gate_of(w);
    ws.hidden.array() *= ws.gate.array();
    if (cache) cache->gate = ws.gate;
  }
  if (cache) cache->hidden = ws.hidden;
  out.noalias() = ws.hidden * w.mlp_out;
  if (w.mlp_out_bias.size()) out.rowwise() += w.mlp_out_bias;
}

}  // namespace

double mlp_activation(double z, MlpActivation a) { return activation<double>(z, a); }
float mlp_activation(float z, MlpActivation a) { return activation<float>(z, a); }

void mlp_forward(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, MlpActivation a, MlpWorkspace& ws,
                 Matrix& out, MlpCacheT<double>* cache) {
  forward_impl<double>(X, w, a, ws, out, cache);
}
void mlp_forward(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, MlpActivation a,
                 MlpWorkspaceT<float>& ws, MatrixF& out, MlpCacheT<float>* cache) {
  forward_impl<float>(X, w, a, ws, out, cache);
}

// ---- adjoint and tangent ----

template <class T>
T activation_derivative(T z, MlpActivation a) {
  switch (a) {
    case MlpActivation::relu: return z > T(0) ? T(1) : T(0);
    case MlpActivation::gelu: {  // d/dz z Phi(z) = Phi(z) + z phi(z)
      const T Phi = T(0.5) * (T(1) + std::erf(z * T(0.70710678118654752440)));
      const T phi = T(0.39894228040143267794) * std::exp(T(-0.5) * z * z);
      return Phi + z * phi;
    }
    case MlpActivation::gelu_tanh: {  // u = c (z + k z^3), f = z (1 + tanh u) / 2
      const T c = T(0.79788456080286535588), k = T(0.044715);
      const T t = std::tanh(c * (z + k * z * z * z));
      return T(0.5) * (T(1) + t) + T(0.5) * z * (T(1) - t * t) * c * (T(1) + T(3) * k * z * z);
    }
    case MlpActivation::tanh: {  // tanh' = 1 - tanh^2
      const T t = std::tanh(z);
      return T(1) - t * t;
    }
    case MlpActivation::swiglu: {  // silu' = sigma (1 + z (1 - sigma))
      const T sigma = T(1) / (T(1) + std::exp(-z));
      return sigma * (T(1) + z * (T(1) - sigma));
    }
  }
  return T(1);
}

namespace {
template <class T>
MatrixT<T> derivative_at(const MatrixT<T>& Z, MlpActivation act) {
  return Z.unaryExpr([act](T z) { return activation_derivative<T>(z, act); });
}
template <class T>
MatrixT<T> activation_at(const MatrixT<T>& Z, MlpActivation act) {
  return Z.unaryExpr([act](T z) { return activation<T>(z, act); });
}
}  // namespace

template <class T>
MatrixT<T> mlp_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, MlpActivation act, const MlpCacheT<T>& c,
                        const MatrixT<T>& dOut, MlpGradsT<T>& g) {
  g.d_out = c.hidden.transpose() * dOut;                            // dW_out = H^T dM
  if (w.mlp_out_bias.size()) g.d_out_bias = dOut.colwise().sum();  // db_out = 1^T dM
  const MatrixT<T> dH = dOut * w.mlp_out.transpose();
  MatrixT<T> dZ = dH.cwiseProduct(derivative_at<T>(c.pre, act));
  MatrixT<T> dU;  // swiglu: dL/d(X W_gate) = dH .* silu(Z)
  if (act == MlpActivation::swiglu) {
    dZ.array() *= c.gate.array();
    dU = dH.cwiseProduct(activation_at<T>(c.pre, act));
    g.d_gate = X.transpose() * dU;                                  // dW_gate = X^T dU
  }
  g.d_in = X.transpose() * dZ;                                      // dW_in = X^T dZ
  if (w.mlp_in_bias.size()) g.d_in_bias = dZ.colwise().sum();
  MatrixT<T> dX = dZ * w.mlp_in.transpose();                        // dX = dZ W_in^T
  if (act == MlpActivation::swiglu) dX.noalias() += dU * gate_of(w).transpose();  // + dU W_gate^T
  return dX;
}

template <class T>
MatrixT<T> mlp_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, MlpActivation act, const MatrixT<T>& dOut,
                        MlpGradsT<T>& g) {
  MlpWorkspaceT<T> ws;
  MlpCacheT<T> c;
  MatrixT<T> out;
  mlp_forward(X, w, act, ws, out, &c);
  return mlp_backward<T>(X, w, act, c, dOut, g);
}

template <class T>
MatrixT<T> mlp_jvp(const LayerWeightsT<T>& w, MlpActivation act, const MlpCacheT<T>& c, const MatrixT<T>& dX) {
  MatrixT<T> dZ = (dX * w.mlp_in).cwiseProduct(derivative_at<T>(c.pre, act));
  if (act == MlpActivation::swiglu)  // silu'(Z) .* (dX W_in) .* U + silu(Z) .* (dX W_gate)
    dZ = dZ.cwiseProduct(c.gate) + activation_at<T>(c.pre, act).cwiseProduct(dX * gate_of(w));
  return dZ * w.mlp_out;
}

#define RCSIM_MLP_OPS(T)                                                                                         \
  template T activation_derivative<T>(T, MlpActivation);                                                        \
  template MatrixT<T> mlp_backward<T>(const MatrixT<T>&, const LayerWeightsT<T>&, MlpActivation, const MlpCacheT<T>&, \
                                      const MatrixT<T>&, MlpGradsT<T>&);                                         \
  template MatrixT<T> mlp_backward<T>(const MatrixT<T>&, const LayerWeightsT<T>&, MlpActivation, const MatrixT<T>&,  \
                                      MlpGradsT<T>&);                                                            \
  template MatrixT<T> mlp_jvp<T>(const LayerWeightsT<T>&, MlpActivation, const MlpCacheT<T>&, const MatrixT<T>&);
RCSIM_MLP_OPS(double)
RCSIM_MLP_OPS(float)
#undef RCSIM_MLP_OPS

}  // namespace rcsim
