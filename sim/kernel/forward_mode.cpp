#include "kernel/forward_mode.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

#include "kernel/block_cache.hpp"
#include "kernel/errors.hpp"

namespace rcsim {
namespace fwd {

using bwd::attention_dropout;
using bwd::BranchCache;
using bwd::HeadCache;
using bwd::output_dropout;

// Tangent of xhat = c inv(c), inv = (||c||^2 / d + eps)^(-1/2) along dc:
//   dxhat = inv (dc - xhat (xhat . dc) / d)   (the map is symmetric: the adjoint's formula).
template <class T>
RowVectorT<T> scaled_jvp(const RowVectorT<T>& xhat, T inv, const RowVectorT<T>& dc) {
  const T d = static_cast<T>(xhat.size());
  return inv * (dc - xhat * (xhat.dot(dc) / d));
}

template <class T>
MatrixT<T> norm_jvp(const MatrixT<T>& Y, const MatrixT<T>& dY, const Normalization& norm) {
  const Eigen::Index n = Y.rows(), dd = Y.cols();
  const T d = static_cast<T>(dd), tiny = std::numeric_limits<T>::min();
  const T eps = static_cast<T>(norm.eps);
  if (norm.type == NormType::none) return dY;
  const RowVectorT<T> gain = norm.gain.template cast<T>();
  MatrixT<T> dOut = MatrixT<T>::Zero(n, dd);
  for (Eigen::Index i = 0; i < n; ++i) {
    const RowVectorT<T> y = Y.row(i), dy = dY.row(i);
    switch (norm.type) {
      case NormType::none: break;
      case NormType::sphere: {  // out = y / r: d out = (dy - u (u . dy)) / r, u = y / r
        const T r = y.norm();
        if (r < tiny) break;
        const RowVectorT<T> u = y / r;
        dOut.row(i) = (dy - u * u.dot(dy)) / r;
        break;
      }
      case NormType::projection:  // out = y - mean(y)
        dOut.row(i) = dy.array() - dy.mean();
        break;
      case NormType::layernorm: {  // out = gain .* xhat + b, xhat = c inv, c = y - mean(y); b constant
        const RowVectorT<T> c = y.array() - y.mean();
        const T r = c.norm();
        if (r < tiny) break;
        const T inv = bwd::inverse_rms<T>(r, d, eps);
        const RowVectorT<T> dc = dy.array() - dy.mean();
        dOut.row(i) = scaled_jvp<T>(c * inv, inv, dc).cwiseProduct(gain);
        break;
      }
      case NormType::rmsnorm: {  // out = gain .* xhat, xhat = y inv
        const T r = y.norm();
        if (r < tiny) break;
        const T inv = bwd::inverse_rms<T>(r, d, eps);
        dOut.row(i) = scaled_jvp<T>(y * inv, inv, dy).cwiseProduct(gain);
        break;
      }
    }
  }
  return dOut;
}

// Tangent of the rows y -> s y / |y| (QK-normalisation) along dy: s (dy - u (u . dy)) / |y|; a
// zero row (left 0 by the forward) has tangent 0.
template <class T>
MatrixT<T> scaled_sphere_jvp(const MatrixT<T>& Y, const MatrixT<T>& dY, T s) {
  MatrixT<T> out = MatrixT<T>::Zero(Y.rows(), Y.cols());
  for (Eigen::Index i = 0; i < Y.rows(); ++i) {
    const T r = Y.row(i).norm();
    if (r == 0.0) continue;
    const RowVectorT<T> u = Y.row(i) / r;
    out.row(i) = (s / r) * (dY.row(i) - u * u.dot(dY.row(i)));
  }
  return out;
}

// Tangent of the masked softmax A along dS: dA_ij = A_ij (dS_ij - sum_k A_ik dS_ik) on the allowed
// entries, exactly 0 off them. USA (A = exp(S)/N): dA = A .* dS.
template <class T>
MatrixT<T> softmax_jvp(const MatrixT<T>& A, const MatrixT<T>& dS, const MaskMatrix& mask, bool usa) {
  using Arr = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic>;
  const Arr allowed = mask.template cast<T>().array();
  const Arr AdS = allowed * A.array() * dS.array();
  if (usa) return AdS.matrix();
  const Eigen::Array<T, Eigen::Dynamic, 1> dot = AdS.rowwise().sum();
  return (AdS - allowed * A.array() * dot.replicate(1, A.cols())).matrix();
}

// The attention branch's tangent from its caches (attention_branch's activations at X):
//   Y = D_out .* (c sum_h A_used,h V_h + 1 b_O^T),  dY = D_out .* (c sum_h (dA_used,h V_h + A_used,h dV_h)).
template <class T>
MatrixT<T> attention_branch_jvp(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                                const BranchCache<T>& cache, const MatrixT<T>& dX) {
  const std::size_t H = w.q.size();
  const T head_scale = (p.head_mean && H > 1) ? T(1) / static_cast<T>(H) : T(1);
  const T s = T(1) / std::sqrt(static_cast<T>(p.d_qk));
  MatrixT<T> dY = MatrixT<T>::Zero(X.rows(), X.cols());
  for (std::size_t h = 0; h < H; ++h) {
    const HeadCache<T>& c = cache.heads[h];
    MatrixT<T> dV = dX * w.v[h];                        // d(X W_V + 1 b_V^T) = dX W_V
    if (!w.o.empty()) dV = dV * w.o[h];                 // V = (X W_V) W_O
    MatrixT<T> dYh = c.used(p) * dV;                    // A_used dV
    if (!p.hardmax) {  // hardmax: A is piecewise constant in S, dA = 0
      MatrixT<T> dQ = dX * w.q[h], dK = dX * w.k[h];
      if (p.qk_norm) {  // Q = s q/|q|, K = s k/|k|
        dQ = scaled_sphere_jvp<T>(c.Q_raw, dQ, static_cast<T>(p.qk_scale));
        dK = scaled_sphere_jvp<T>(c.K_raw, dK, static_cast<T>(p.qk_scale));
      }
      const T scale = p.qk_norm ? std::sqrt(static_cast<T>(c.Q.cols())) : s;
      const MatrixT<T> dS = scale * (dQ * c.K.transpose() + c.Q * dK.transpose());  // logit biases: constant
      MatrixT<T> dA = softmax_jvp<T>(c.A, dS, *p.mask, p.usa);
      if (p.shape.active()) dA *= static_cast<T>(p.shape.a);  // A_s = a A + b I - c C (b, c constant)
      if (c.D.size()) dA = dA.cwiseProduct(c.D);             // A_used = D .* A_s
      dYh.noalias() += dA * c.V;
    }
    dY += dYh;
  }
  if (head_scale != T(1)) dY *= head_scale;
  if (cache.D.size()) dY = dY.cwiseProduct(cache.D);
  return dY;
}

// Tangent of the MLP M(X) = act(X W_in + b_in) W_out + b_out: dM = (act'(Z) .* (dX W_in)) W_out.
template <class T>
MatrixT<T> mlp_jvp(const MatrixT<T>& X, const LayerWeightsT<T>& w, MlpActivation act, const MatrixT<T>& dX) {
  MatrixT<T> Z = X * w.mlp_in;
  if (w.mlp_in_bias.size()) Z.rowwise() += w.mlp_in_bias;
  const MatrixT<T> dZ = (dX * w.mlp_in).cwiseProduct(
      Z.unaryExpr([act](T z) { return bwd::activation_derivative<T>(z, act); }));
  return dZ * w.mlp_out;
}

template <class T>
using BranchJvp = std::function<MatrixT<T>(const MatrixT<T>&, const MatrixT<T>&)>;  // (input, d input) -> dF

// The sub-block's tangent from the activations SubBlock::forward kept (kernel/block_cache.hpp):
//   post: N(s X + a F(X))          d = N'(Z) (s dX + a dF)          (a = 0: N'(Z) dF)
//   pre:  s X + a F(c N(X))        d = s dX + a dF(c N'(X) dX)      (a = 0: dF)
//   peri: s X + a N_out(F(N(X)))   d = s dX + a N_out'(Y) dF(N'(X) dX)
//   ngpt: N((1 - a) X + a N_out(F(X)))   d = N'(Z) ((1 - a) dX + a N_out'(Y) dF)
template <class T>
MatrixT<T> sub_block_jvp(const bwd::SubBlock<T>& b, const MatrixT<T>& X, const MatrixT<T>& dX, const BranchJvp<T>& dF) {
  const T a = b.a, s = b.s;
  switch (b.pos) {
    case NormPosition::post: {
      const MatrixT<T> dY = dF(X, dX);
      const MatrixT<T> dZ = a != 0.0 ? MatrixT<T>(s * dX + a * dY) : dY;
      return norm_jvp<T>(b.Z, dZ, b.n);
    }
    case NormPosition::pre: {
      MatrixT<T> dXn = norm_jvp<T>(X, dX, b.n);
      if (b.c != 1.0) dXn *= b.c;
      const MatrixT<T> dY = dF(b.Xn, dXn);
      return a != 0.0 ? MatrixT<T>(s * dX + a * dY) : dY;
    }
    case NormPosition::peri: {
      const MatrixT<T> dY = dF(b.Xn, norm_jvp<T>(X, dX, b.n));
      const MatrixT<T> dYn = norm_jvp<T>(b.Y, dY, b.n_out);
      return a != 0.0 ? MatrixT<T>(s * dX + a * dYn) : dYn;
    }
    case NormPosition::ngpt: {
      const MatrixT<T> dYn = norm_jvp<T>(b.Y, dF(X, dX), b.n_out);
      return norm_jvp<T>(b.Z, MatrixT<T>((T(1) - a) * dX + a * dYn), b.n);
    }
  }
  return dX;
}

template <class T>
MatrixT<T> block_jvp(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p, const MatrixT<T>& dX,
                     RandomStream* dropout) {
  const double p_out = output_dropout(p.layer);
  if ((attention_dropout(p.layer) > 0.0 || p_out > 0.0) && !dropout)
    throw std::logic_error("block_jvp: dropout needs the dropout stream of the block");
  if (p.layer.tangent)
    throw UsageError("jacobian_log_spec2_full: residual.project = tangent is not supported by the forward-mode pass");
  // The forward activations exactly as block_backward recomputes them (same functions, same draws).
  static const Normalization identity;
  LayerParams inner = p.layer;
  inner.alpha = 0.0;
  inner.norm = &identity;
  inner.keep_attention = false;
  BranchCache<T> cache;
  const bwd::Branch<T> attn = [&](const MatrixT<T>& in) {
    return bwd::attention_branch(in, w, inner, dropout, cache);
  };
  const BranchJvp<T> attn_jvp = [&](const MatrixT<T>& in, const MatrixT<T>& din) {
    return attention_branch_jvp<T>(in, w, inner, cache, din);
  };
  bwd::SubBlock<T> sa(p.position, p.layer.alpha, p.layer.skip, bwd::norm_at(w, p, kNormAttn),
                      bwd::norm_at(w, p, kNormAttnOut), kNormAttn, kNormAttnOut);
  sa.c = static_cast<T>(p.layer.norm_scale);
  const MatrixT<T> middle = sa.forward(X, attn);
  const MatrixT<T> dMiddle = sub_block_jvp<T>(sa, X, dX, attn_jvp);
  if (w.mlp_in.size() == 0) return dMiddle;
  MlpWorkspaceT<T> mws;
  MatrixT<T> D;  // the MLP output's dropout mask, drawn after the attention's (as block_backward)
  const bwd::Branch<T> mlp = [&](const MatrixT<T>& in) {
    MatrixT<T> out;
    mlp_forward(in, w, p.activation, mws, out);
    if (p_out > 0.0) {
      D = bwd::dropout_mask<T>(out.rows(), out.cols(), p_out, *dropout);
      out = out.cwiseProduct(D);
    }
    return out;
  };
  const BranchJvp<T> mlp_tangent = [&](const MatrixT<T>& in, const MatrixT<T>& din) {
    const MatrixT<T> dM = mlp_jvp<T>(in, w, p.activation, din);
    return D.size() ? MatrixT<T>(dM.cwiseProduct(D)) : dM;
  };
  bwd::SubBlock<T> sm(p.position, mlp_alpha_of(p), mlp_skip_of(p), bwd::norm_at(w, p, kNormMlp),
                      bwd::norm_at(w, p, kNormMlpOut), kNormMlp, kNormMlpOut);
  sm.c = static_cast<T>(p.layer.norm_scale);
  sm.forward(middle, mlp);
  return sub_block_jvp<T>(sm, middle, dMiddle, mlp_tangent);
}

}  // namespace fwd

Matrix norm_jvp(const Matrix& Y, const Matrix& dY, const Normalization& norm) { return fwd::norm_jvp<double>(Y, dY, norm); }

Matrix block_jvp(const Matrix& X, const LayerWeights& w, const BlockParams& p, const Matrix& dX, RandomStream* dropout) {
  return fwd::block_jvp<double>(X, w, p, dX, dropout);
}

StackJacobian::StackJacobian(int layers, int length, SegmentReplay replay, const BlockParams& p)
    : layers_(layers), length_(std::max(1, std::min(length, std::max(layers, 1)))), replay_(std::move(replay)), p_(p) {}

const BlockTape& StackJacobian::segment(int s) {
  if (held_ != s) {
    const int begin = s * length_, end = std::min(layers_, begin + length_);
    replay_(begin, end, tape_);
    held_ = s;
  }
  return tape_;
}

Matrix StackJacobian::jvp(int t, const Matrix& V) {
  Matrix dX = V;
  if (t >= layers_) return dX;
  for (int s = t / length_; s * length_ < layers_; ++s) {
    const BlockTape& tape = segment(s);
    const int begin = s * length_, end = std::min(layers_, begin + length_);
    for (int k = std::max(t, begin); k < end; ++k) {
      const auto i = static_cast<std::size_t>(k - begin);
      std::optional<RandomStream> rng;  // a copy: the recompute advances it
      if (!tape.dropout.empty()) rng = tape.dropout[i];
      dX = block_jvp(tape.inputs[i], tape.weights[i], at_layer(p_, k), dX, rng ? &*rng : nullptr);
    }
  }
  return dX;
}

Matrix StackJacobian::vjp(int t, const Matrix& U) {
  Matrix dX = U;
  if (t >= layers_) return dX;
  BlockGrads g;
  BlockParams p = p_;
  p.single = false;  // the adjoint of the double forward-mode pass (the measure refuses float32 runs)
  for (int s = (layers_ - 1) / length_; s >= t / length_; --s) {
    const BlockTape& tape = segment(s);
    const int begin = s * length_, end = std::min(layers_, begin + length_);
    for (int k = end - 1; k >= std::max(t, begin); --k) {
      const auto i = static_cast<std::size_t>(k - begin);
      std::optional<RandomStream> rng;
      if (!tape.dropout.empty()) rng = tape.dropout[i];
      block_backward(tape.inputs[i], tape.weights[i], at_layer(p, k), dX, g, rng ? &*rng : nullptr);
      dX = std::move(g.dX);
    }
  }
  return dX;
}

PowerIteration jacobian_power_iteration(StackJacobian& J, int t, const Matrix& V0, int max_iterations,
                                        double tolerance) {
  PowerIteration r;
  Matrix v = V0 / V0.norm();
  double previous = 0.0;
  for (int k = 1; k <= max_iterations; ++k) {
    const Matrix Jv = J.jvp(t, v);
    r.lambda = Jv.squaredNorm();  // v^T J^T J v with ||v|| = 1
    r.iterations = k;
    if (k > 1 && std::abs(r.lambda - previous) <= tolerance * r.lambda) {
      r.converged = true;
      break;
    }
    if (k == max_iterations) break;
    const Matrix u = J.vjp(t, Jv);  // J^T J v
    const double nu = u.norm();
    if (!(nu > 0.0)) {  // J v = 0 (or not finite): nothing to iterate on
      r.converged = nu == 0.0;
      break;
    }
    v = u / nu;
    previous = r.lambda;
  }
  return r;
}

}  // namespace rcsim
