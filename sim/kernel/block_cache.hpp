// The forward activations of one block as the hand-written adjoint (backward.cpp) and the
// tangent-linear pass (forward_mode.cpp) recompute them from the block's input: every head's
// Q, K, A (and the shaped, dropped A), X W_V and V; the sub-blocks' normalised inputs and
// pre-normalisation sums. Internal to the kernel's derivative passes (not a public interface):
// both passes linearise the block at exactly these values, drawn from the same dropout stream.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "kernel/attention.hpp"
#include "kernel/backward.hpp"
#include "kernel/dropout.hpp"
#include "kernel/layer.hpp"
#include "kernel/mlp.hpp"
#include "kernel/normalization.hpp"
#include "kernel/particles.hpp"
#include "kernel/random.hpp"
#include "kernel/unnormalised_attention.hpp"

namespace rcsim {
namespace bwd {

// The normalisation adjoint (backward.cpp), used by SubBlock::backward.
template <class T>
MatrixT<T> norm_backward(const MatrixT<T>& Y, const MatrixT<T>& dOut, const Normalization& norm, RowVectorT<T>& dgain,
                         RowVectorT<T>& dbias);

// 1 / sqrt(r^2 / d + eps) as normalization.cpp computes it (exact sqrt(d) / r for eps = 0).
template <class T>
T inverse_rms(T r, T d, T eps) {
  if (eps == T(0)) return std::sqrt(d) / r;
  return T(1) / std::sqrt(r * r / d + eps);
}

// act'(z) for the MLP activations (kernel/mlp.hpp).
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
  }
  return T(1);
}

// One head's forward, kept for its adjoint: Q = X W_Q (+ 1 b_Q^T), K likewise, the attention A
// (softmax, USA or hardmax of S = Q K^T / sqrt(d_QK) on the mask, before shaping), the shaped As
// (when attention.shape is active), X W_V (+ 1 b_V^T) and V = (X W_V) W_O (or X W_V).
template <class T>
struct HeadCache {
  MatrixT<T> Q, K, A, As, XV, V;
  MatrixT<T> Q_raw, K_raw;  // QK-normalisation: the projections before s q/|q|, s k/|k|
  MatrixT<T> D, Ad;  // with attention dropout: the mask (0 or 1/(1-p)) and the weights used, D .* A_s
  // The attention matrix the head multiplies V with: dropped, shaped or plain.
  const MatrixT<T>& used(const LayerParams& p) const { return D.size() ? Ad : (p.shape.active() ? As : A); }
};

// The dropout mask of an m x n matrix: the draws apply_dropout makes on it (row-major, one uniform
// per entry), as a matrix of 0 and 1/(1-p) (apply_dropout on ones: the same draws, the same scale).
template <class T>
MatrixT<T> dropout_mask(Eigen::Index m, Eigen::Index n, double prob, RandomStream& rng) {
  MatrixT<T> D = MatrixT<T>::Ones(m, n);
  apply_dropout(D, prob, rng);
  return D;
}

inline double attention_dropout(const LayerParams& p) { return p.dropout ? p.dropout->attention : 0.0; }
inline double output_dropout(const LayerParams& p) { return p.dropout ? p.dropout->output : 0.0; }

template <class T>
void head_forward(const MatrixT<T>& X, const LayerWeightsT<T>& w, std::size_t h, const LayerParams& p, RandomStream* rng,
                  HeadCache<T>& c) {
  if (p.random_markov)  // A = softmax(G_h) on the mask: the layer's drawn logits, independent of X
    c.A = w.logits[h];
  else if (!w.q_bias.empty())
    attention_logits(X, w.q[h], &w.q_bias[h], w.k[h], &w.k_bias[h], p.d_qk, c.Q, c.K, c.A);
  else
    attention_logits(X, w.q[h], w.k[h], p.d_qk, c.Q, c.K, c.A);
  if (p.qk_norm && !p.random_markov) {  // Q, K become s q/|q|, s k/|k| (the projections kept)
    c.Q_raw = c.Q;
    c.K_raw = c.K;
    qk_normalise(c.Q, c.K, c.A, p.qk_scale);
  }
  if (p.logit_bias.active()) add_logit_bias(c.A, p.logit_bias, w, h);  // constant B: dS unchanged
  if (p.usa)
    usa_weights(c.A, *p.mask, p.usa_shift);
  else if (p.hardmax)
    hardmax_weights(c.A, *p.mask);
  else
    masked_softmax(c.A, *p.mask);
  if (p.shape.active()) {
    c.As = c.A;
    shape_attention(c.As, *p.mask, p.shape);
  }
  if (attention_dropout(p) > 0.0) {  // after the shaping, as layer_impl applies it
    c.D = dropout_mask<T>(c.A.rows(), c.A.cols(), attention_dropout(p), *rng);
    c.Ad = (p.shape.active() ? c.As : c.A).cwiseProduct(c.D);
  }
  c.XV.noalias() = X * w.v[h];
  if (!w.v_bias.empty()) c.XV.rowwise() += w.v_bias[h];
  if (!w.o.empty())
    c.V.noalias() = c.XV * w.o[h];
  else
    c.V = c.XV;
}

// The attention branch's activations: every head's, and the output dropout mask (empty without).
template <class T>
struct BranchCache {
  std::vector<HeadCache<T>> heads;
  MatrixT<T> D;
};

// The attention branch Y = D .* (c sum_h A_h V_h + 1 b_O^T) from the heads' caches, as
// attention_layer computes it without residual and normalisation (the order of its sums may differ
// in the last bits); D the output dropout mask (ones without dropout). Dropout draws from `rng`.
template <class T>
MatrixT<T> attention_branch(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p, RandomStream* rng,
                        BranchCache<T>& cache) {
  const std::size_t H = w.q.size();
  cache.heads.resize(H);
  MatrixT<T> Y = MatrixT<T>::Zero(X.rows(), X.cols());
  for (std::size_t h = 0; h < H; ++h) {
    head_forward(X, w, h, p, rng, cache.heads[h]);
    Y.noalias() += cache.heads[h].used(p) * cache.heads[h].V;
  }
  if (p.head_mean && H > 1) Y /= static_cast<T>(H);
  if (!w.q_bias.empty()) Y.rowwise() += w.o_bias;
  cache.D.resize(0, 0);
  if (output_dropout(p) > 0.0) {
    cache.D = dropout_mask<T>(Y.rows(), Y.cols(), output_dropout(p), *rng);
    Y = Y.cwiseProduct(cache.D);
  }
  return Y;
}

template <class T>
const Normalization& norm_at(const LayerWeightsT<T>& w, const BlockParams& p, int slot) {
  return w.norms_from_file ? w.norms[slot] : *p.layer.norm;
}

template <class T>
MatrixT<T> normalised(const MatrixT<T>& Y, const Normalization& n) {
  MatrixT<T> Z = Y;
  normalize_rows(Z, n);
  return Z;
}

template <class T>
using Branch = std::function<MatrixT<T>(const MatrixT<T>&)>;                          // F(input)
template <class T>
using BranchBackward = std::function<MatrixT<T>(const MatrixT<T>&, const MatrixT<T>&)>;  // (input, dF) -> d input

// One sub-block (attention or MLP) around the branch F with the normalisations N (slot `main`)
// and N_out (slot `out`) at placement `pos` (kernel/block.hpp). forward() keeps what backward() needs.
// With a skip gain s (residual.skip; post, pre, peri) the residual is s X + a F(.): the adjoint adds
// s dOut (s dZ) instead of dOut (dZ). nGPT's step has its own skip weight 1 - a (s ignored).
// With the LayerNorm scaling c (pre), X + a F(c N(X)): the branch's input adjoint is multiplied by c.
template <class T>
struct SubBlock {
  NormPosition pos;
  T a, s;
  T c = T(1);  // pre: the LayerNorm scaling of the layer (norm.depth_scaling), c N(X)
  const Normalization &n, &n_out;
  int main, out;
  MatrixT<T> Xn, Y, Yn, Z;  // N(X), F(.), N_out(Y), the sum before the last N

  SubBlock(NormPosition pos_, double a_, double s_, const Normalization& n_, const Normalization& n_out_, int main_,
           int out_)
      : pos(pos_), a(a_), s(s_), n(n_), n_out(n_out_), main(main_), out(out_) {}

  MatrixT<T> residual(const MatrixT<T>& X, const MatrixT<T>& F) const {
    return s == 1.0 ? MatrixT<T>(X + a * F) : MatrixT<T>(s * X + a * F);
  }

  MatrixT<T> forward(const MatrixT<T>& X, const Branch<T>& F) {
    switch (pos) {
      case NormPosition::post:  // N(X + a F(X))  (a = 0: N(F(X)))
        Y = F(X);
        Z = a != 0.0 ? residual(X, Y) : Y;
        return normalised(Z, n);
      case NormPosition::pre:  // X + a F(c N(X)), c the LayerNorm scaling (1 without)
        Xn = normalised(X, n);
        if (c != 1.0) Xn *= c;
        Y = F(Xn);
        return a != 0.0 ? residual(X, Y) : Y;
      case NormPosition::peri:  // X + a N_out(F(N(X)))
        Xn = normalised(X, n);
        Y = F(Xn);
        Yn = normalised(Y, n_out);
        return a != 0.0 ? residual(X, Yn) : Yn;
      case NormPosition::ngpt:  // N(X + a (N_out(F(X)) - X))
        Y = F(X);
        Yn = normalised(Y, n_out);
        Z = X + a * (Yn - X);
        return normalised(Z, n);
    }
    return X;
  }

  MatrixT<T> backward(const MatrixT<T>& X, const MatrixT<T>& dOut, const BranchBackward<T>& dF, BlockGradsT<T>& g) const {
    switch (pos) {
      case NormPosition::post: {
        const MatrixT<T> dZ = norm_backward(Z, dOut, n, g.dgain[main], g.dbias[main]);
        if (a == 0.0) return dF(X, dZ);
        return s * dZ + dF(X, a * dZ);
      }
      case NormPosition::pre: {
        MatrixT<T> dXn = dF(Xn, a != 0.0 ? MatrixT<T>(a * dOut) : dOut);
        if (c != 1.0) dXn *= c;                        // d(c N(X)) = c dN
        MatrixT<T> dX = norm_backward(X, dXn, n, g.dgain[main], g.dbias[main]);
        if (a != 0.0) dX += s * dOut;
        return dX;
      }
      case NormPosition::peri: {
        const MatrixT<T> dY = norm_backward(Y, a != 0.0 ? MatrixT<T>(a * dOut) : dOut, n_out, g.dgain[out], g.dbias[out]);
        MatrixT<T> dX = norm_backward(X, dF(Xn, dY), n, g.dgain[main], g.dbias[main]);
        if (a != 0.0) dX += s * dOut;
        return dX;
      }
      case NormPosition::ngpt: {
        const MatrixT<T> dZ = norm_backward(Z, dOut, n, g.dgain[main], g.dbias[main]);  // Z = (1 - a) X + a Yn
        const MatrixT<T> dY = norm_backward(Y, a * dZ, n_out, g.dgain[out], g.dbias[out]);
        return (T(1) - a) * dZ + dF(X, dY);
      }
    }
    return dOut;
  }
};

}  // namespace bwd
}  // namespace rcsim
