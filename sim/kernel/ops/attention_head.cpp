#include "kernel/ops/attention_head.hpp"

#include <cmath>
#include <stdexcept>

#include "kernel/ops/attention_weights.hpp"
#include "kernel/ops/differential_attention.hpp"
#include "kernel/ops/logit_softcap.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/ops/qk_transforms.hpp"

namespace rcsim {

namespace {

// Whether the head's weights vary with X through the logits (not hardmax, not random-Markov).
bool logits_vary(const LayerParams& p) { return !p.hardmax() && !p.random_markov(); }

// The logits' scale: 1/sqrt(d_QK), or sqrt(d_k) with QK-normalisation.
template <class T>
T logit_scale(const LayerParams& p, const HeadCacheT<T>& c) {
  return p.attention.qk_norm ? std::sqrt(static_cast<T>(c.Q.cols())) : T(1) / std::sqrt(static_cast<T>(p.d_qk));
}

// One head's adjoint: dYh = dL/d(A_used V_h); adds its weight gradients and its part of dX.
template <class T>
void head_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p, std::size_t h,
                   const HeadCacheT<T>& c, const MatrixT<T>& dYh, BlockGradsT<T>& g, MatrixT<T>& dX) {
  if (p.attention.differential) return differential_head_backward<T>(X, w, p, h, c, dYh, g, dX);
  const bool biased = !w.q_bias.empty();
  const MatrixT<T> dV = c.used().transpose() * dYh;  // dV_h = A_used,h^T dY
  MatrixT<T> dXV = dV;
  if (!w.o.empty()) {
    g.dout[h].noalias() += c.XV.transpose() * dV;  // dW_O = (X W_V)^T dV
    dXV.noalias() = dV * w.o[h].transpose();
  }
  g.dv[h].noalias() += X.transpose() * dXV;  // dW_V = X^T d(X W_V)
  if (biased) g.dv_bias[h] += dXV.colwise().sum();
  dX.noalias() += dXV * w.v[h].transpose();
  if (!logits_vary(p)) return;
  MatrixT<T> dA = dYh * c.V.transpose();                      // dA_h = dY V_h^T
  if (c.D.size()) dA = dA.cwiseProduct(c.D);                  // A_used = D .* A_s
  if (p.attention.shape.active()) dA *= static_cast<T>(p.attention.shape.a);      // A_s = a A + b I - c C
  MatrixT<T> dS = attention_weights_backward<T>(p.attention.kind, c.A, c.S, dA, *p.mask);
  if (p.attention.logit_softcap > 0.0) dS = softcap_derivative<T>(c.Sc, dS, p.attention.logit_softcap);  // S_c = c tanh(S / c)
  dS *= logit_scale<T>(p, c);                                 // logit biases: constant, dS unchanged
  MatrixT<T> dQ = dS * c.K, dK = dS.transpose() * c.Q;        // S' = Q K^T
  qk_transforms_adjoint<T>(p.attention, h, c, dQ, dK);       // back through the Q/K transforms (ops/qk_transforms.hpp)
  g.dq[h].noalias() += X.transpose() * dQ;
  g.dk[h].noalias() += X.transpose() * dK;
  if (biased) {
    g.dq_bias[h] += dQ.colwise().sum();
    g.dk_bias[h] += dK.colwise().sum();
  }
  dX.noalias() += dQ * w.q[h].transpose();
  dX.noalias() += dK * w.k[h].transpose();
}

// One head's tangent: d(A_used V_h) along dX.
template <class T>
MatrixT<T> head_jvp(const LayerWeightsT<T>& w, const LayerParams& p, std::size_t h, const HeadCacheT<T>& c,
                    const MatrixT<T>& dX) {
  if (p.attention.differential) return differential_head_jvp<T>(w, p, h, c, dX);
  MatrixT<T> dV = dX * w.v[h];                  // d(X W_V + 1 b_V^T) = dX W_V
  if (!w.o.empty()) dV = dV * w.o[h];           // V = (X W_V) W_O
  MatrixT<T> dYh = c.used() * dV;               // A_used dV
  if (!logits_vary(p)) return dYh;              // hardmax, random-Markov: dA = 0
  MatrixT<T> dQ = dX * w.q[h], dK = dX * w.k[h];
  qk_transforms_tangent<T>(p.attention, h, c, dQ, dK);       // through the Q/K transforms (ops/qk_transforms.hpp)
  MatrixT<T> dS = logit_scale<T>(p, c) * (dQ * c.K.transpose() + c.Q * dK.transpose());
  if (p.attention.logit_softcap > 0.0) dS = softcap_derivative<T>(c.Sc, dS, p.attention.logit_softcap);
  MatrixT<T> dA = attention_weights_jvp<T>(p.attention.kind, c.A, c.S, dS, *p.mask);
  if (p.attention.shape.active()) dA *= static_cast<T>(p.attention.shape.a);
  if (c.D.size()) dA = dA.cwiseProduct(c.D);
  dYh.noalias() += dA * c.V;
  return dYh;
}

template <class T>
T head_scale(const LayerParams& p, std::size_t H) {
  return (p.head_mean && H > 1) ? T(1) / static_cast<T>(H) : T(1);
}

}  // namespace

template <class T>
MatrixT<T> attention_branch_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                                     const LayerCacheT<T>& c, const MatrixT<T>& dY_out, BlockGradsT<T>& g) {
  const std::size_t H = w.q.size();
  const MatrixT<T> dY = c.D.size() ? MatrixT<T>(dY_out.cwiseProduct(c.D)) : dY_out;  // through D .* (.)
  if (!w.q_bias.empty()) g.dout_bias += dY.colwise().sum();  // Y = ... + 1 b_O^T
  const MatrixT<T> dYh = head_scale<T>(p, H) * dY;
  MatrixT<T> dX = MatrixT<T>::Zero(X.rows(), X.cols());
  for (std::size_t h = 0; h < H; ++h) head_backward<T>(X, w, p, h, c.heads[h], dYh, g, dX);
  return dX;
}

template <class T>
MatrixT<T> attention_branch_jvp(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                                const LayerCacheT<T>& c, const MatrixT<T>& dX) {
  const std::size_t H = w.q.size();
  MatrixT<T> dY = MatrixT<T>::Zero(X.rows(), X.cols());
  for (std::size_t h = 0; h < H; ++h) dY += head_jvp<T>(w, p, h, c.heads[h], dX);
  const T scale = head_scale<T>(p, H);
  if (scale != T(1)) dY *= scale;
  if (c.D.size()) dY = dY.cwiseProduct(c.D);
  return dY;
}

#define RCSIM_ATTENTION_OPS(T)                                                                                    \
  template MatrixT<T> attention_branch_backward<T>(const MatrixT<T>&, const LayerWeightsT<T>&, const LayerParams&, \
                                                   const LayerCacheT<T>&, const MatrixT<T>&, BlockGradsT<T>&);     \
  template MatrixT<T> attention_branch_jvp<T>(const MatrixT<T>&, const LayerWeightsT<T>&, const LayerParams&,      \
                                              const LayerCacheT<T>&, const MatrixT<T>&);
RCSIM_ATTENTION_OPS(double)
RCSIM_ATTENTION_OPS(float)
#undef RCSIM_ATTENTION_OPS

}  // namespace rcsim
