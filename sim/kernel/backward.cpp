#include "kernel/backward.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernel/attention.hpp"
#include "kernel/dropout.hpp"
#include "kernel/errors.hpp"
#include "kernel/layer.hpp"
#include "kernel/mlp.hpp"
#include "kernel/normalization.hpp"
#include "kernel/particles.hpp"
#include "kernel/unnormalised_attention.hpp"

namespace rcsim {

Matrix softmax_backward(const Matrix& A, const Matrix& dA, const MaskMatrix& mask) {
  // dS_ij = A_ij (dA_ij - sum_k A_ik dA_ik) over the allowed entries, exactly 0 off them.
  const Eigen::ArrayXXd allowed = mask.cast<double>().array();
  const Eigen::ArrayXXd AdA = allowed * A.array() * dA.array();
  const Eigen::ArrayXd dot = AdA.rowwise().sum();
  return (AdA - allowed * A.array() * dot.replicate(1, A.cols())).matrix();
}

Matrix usa_backward(const Matrix& A, const Matrix& dA, const MaskMatrix& mask) {
  // d exp(S)/N = exp(S)/N dS on the allowed entries, exactly 0 off them.
  return (mask.cast<double>().array() * A.array() * dA.array()).matrix();
}

namespace {

// 1 / sqrt(r^2 / d + eps) as normalization.cpp computes it (exact sqrt(d) / r for eps = 0).
double inverse_rms(double r, double d, double eps) {
  if (eps == 0.0) return std::sqrt(d) / r;
  return 1.0 / std::sqrt(r * r / d + eps);
}

// Adjoint of xhat = c * inv(c), inv = (||c||^2 / d + eps)^(-1/2):
//   dc = inv (dxhat - xhat (xhat . dxhat) / d).
RowVector scaled_backward(const RowVector& xhat, double inv, const RowVector& dxhat) {
  const double d = static_cast<double>(xhat.size());
  return inv * (dxhat - xhat * (xhat.dot(dxhat) / d));
}

}  // namespace

Matrix norm_backward(const Matrix& Y, const Matrix& dOut, const Normalization& norm, RowVector& dgain,
                     RowVector& dbias) {
  const Eigen::Index n = Y.rows(), dd = Y.cols();
  const double d = static_cast<double>(dd), tiny = std::numeric_limits<double>::min();
  if (dgain.size() != dd) dgain = RowVector::Zero(dd);
  if (dbias.size() != dd) dbias = RowVector::Zero(dd);
  if (norm.type == NormType::none) return dOut;
  Matrix dY = Matrix::Zero(n, dd);
  for (Eigen::Index i = 0; i < n; ++i) {
    const RowVector y = Y.row(i), g = dOut.row(i);
    switch (norm.type) {
      case NormType::none: break;
      case NormType::sphere: {  // out = y / ||y||: dy = (g - u (u . g)) / ||y||, u = y / ||y||
        const double r = y.norm();
        if (r < tiny) break;
        const RowVector u = y / r;
        dY.row(i) = (g - u * u.dot(g)) / r;
        break;
      }
      case NormType::projection:  // out = y - mean(y): dy = g - mean(g)
        dY.row(i) = g.array() - g.mean();
        break;
      case NormType::layernorm: {  // out = gain xhat + b, xhat = c inv, c = y - mean(y)
        dbias += g;
        const RowVector c = y.array() - y.mean();
        const double r = c.norm();
        if (r < tiny) break;
        const double inv = inverse_rms(r, d, norm.eps);
        const RowVector xhat = c * inv;
        dgain += g.cwiseProduct(xhat);
        const RowVector dc = scaled_backward(xhat, inv, g.cwiseProduct(norm.gain));
        dY.row(i) = dc.array() - dc.mean();
        break;
      }
      case NormType::rmsnorm: {  // out = gain xhat, xhat = y inv
        const double r = y.norm();
        if (r < tiny) break;
        const double inv = inverse_rms(r, d, norm.eps);
        const RowVector xhat = y * inv;
        dgain += g.cwiseProduct(xhat);
        dY.row(i) = scaled_backward(xhat, inv, g.cwiseProduct(norm.gain));
        break;
      }
    }
  }
  return dY;
}

namespace {

// act'(z) for the MLP activations (kernel/mlp.hpp).
double activation_derivative(double z, MlpActivation a) {
  switch (a) {
    case MlpActivation::relu: return z > 0.0 ? 1.0 : 0.0;
    case MlpActivation::gelu: {  // d/dz z Phi(z) = Phi(z) + z phi(z)
      const double Phi = 0.5 * (1.0 + std::erf(z * 0.70710678118654752440));
      const double phi = 0.39894228040143267794 * std::exp(-0.5 * z * z);
      return Phi + z * phi;
    }
    case MlpActivation::gelu_tanh: {  // u = c (z + k z^3), f = z (1 + tanh u) / 2
      const double c = 0.79788456080286535588, k = 0.044715;
      const double t = std::tanh(c * (z + k * z * z * z));
      return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * c * (1.0 + 3.0 * k * z * z);
    }
    case MlpActivation::tanh: {  // tanh' = 1 - tanh^2
      const double t = std::tanh(z);
      return 1.0 - t * t;
    }
  }
  return 1.0;
}

}  // namespace

Matrix mlp_backward(const Matrix& X, const LayerWeights& w, MlpActivation act, const Matrix& dOut, MlpGrads& g) {
  // Forward: Z = X W_in + b_in, H = act(Z), M = H W_out + b_out.
  Matrix Z = X * w.mlp_in;
  if (w.mlp_in_bias.size()) Z.rowwise() += w.mlp_in_bias;
  const Matrix Hact = Z.unaryExpr([act](double z) { return mlp_activation(z, act); });
  g.d_out = Hact.transpose() * dOut;                           // dW_out = H^T dM
  if (w.mlp_out_bias.size()) g.d_out_bias = dOut.colwise().sum();  // db_out = 1^T dM
  const Matrix dZ = (dOut * w.mlp_out.transpose()).cwiseProduct(
      Z.unaryExpr([act](double z) { return activation_derivative(z, act); }));  // dZ = (dM W_out^T) .* act'(Z)
  g.d_in = X.transpose() * dZ;                                 // dW_in = X^T dZ
  if (w.mlp_in_bias.size()) g.d_in_bias = dZ.colwise().sum();
  return dZ * w.mlp_in.transpose();                            // dX = dZ W_in^T
}

namespace {

// Adjoint of the rows y -> s y / |y| (QK-normalisation): dy = s (g - u (u . g)) / |y|, u = y / |y|;
// a zero row (left 0 by the forward) gets 0.
Matrix scaled_sphere_backward(const Matrix& Y, const Matrix& G, double s) {
  Matrix dY = Matrix::Zero(Y.rows(), Y.cols());
  for (Eigen::Index i = 0; i < Y.rows(); ++i) {
    const double r = Y.row(i).norm();
    if (r == 0.0) continue;
    const RowVector u = Y.row(i) / r;
    dY.row(i) = (s / r) * (G.row(i) - u * u.dot(G.row(i)));
  }
  return dY;
}

// One head's forward, kept for its adjoint: Q = X W_Q (+ 1 b_Q^T), K likewise, the attention A
// (softmax, USA or hardmax of S = Q K^T / sqrt(d_QK) on the mask, before shaping), the shaped As
// (when attention.shape is active), X W_V (+ 1 b_V^T) and V = (X W_V) W_O (or X W_V).
struct HeadCache {
  Matrix Q, K, A, As, XV, V;
  Matrix Q_raw, K_raw;  // QK-normalisation: the projections before s q/|q|, s k/|k|
  Matrix D, Ad;  // with attention dropout: the mask (0 or 1/(1-p)) and the weights used, D .* A_s
  // The attention matrix the head multiplies V with: dropped, shaped or plain.
  const Matrix& used(const LayerParams& p) const { return D.size() ? Ad : (p.shape.active() ? As : A); }
};

// The dropout mask of an m x n matrix: the draws apply_dropout makes on it (row-major, one uniform
// per entry), as a matrix of 0 and 1/(1-p) (apply_dropout on ones: the same draws, the same scale).
Matrix dropout_mask(Eigen::Index m, Eigen::Index n, double prob, RandomStream& rng) {
  Matrix D = Matrix::Ones(m, n);
  apply_dropout(D, prob, rng);
  return D;
}

double attention_dropout(const LayerParams& p) { return p.dropout ? p.dropout->attention : 0.0; }
double output_dropout(const LayerParams& p) { return p.dropout ? p.dropout->output : 0.0; }

void head_forward(const Matrix& X, const LayerWeights& w, std::size_t h, const LayerParams& p, RandomStream* rng,
                  HeadCache& c) {
  if (!w.q_bias.empty())
    attention_logits(X, w.q[h], &w.q_bias[h], w.k[h], &w.k_bias[h], p.d_qk, c.Q, c.K, c.A);
  else
    attention_logits(X, w.q[h], w.k[h], p.d_qk, c.Q, c.K, c.A);
  if (p.qk_norm) {  // Q, K become s q/|q|, s k/|k| (the projections kept)
    c.Q_raw = c.Q;
    c.K_raw = c.K;
    qk_normalise(c.Q, c.K, c.A, p.qk_scale);
  }
  if (p.logit_bias.active()) add_logit_bias(c.A, p.logit_bias, h, w.q.size());  // constant B: dS unchanged
  if (p.usa)
    usa_weights(c.A, *p.mask);
  else if (p.hardmax)
    hardmax_weights(c.A, *p.mask);
  else
    masked_softmax(c.A, *p.mask);
  if (p.shape.active()) {
    c.As = c.A;
    shape_attention(c.As, *p.mask, p.shape);
  }
  if (attention_dropout(p) > 0.0) {  // after the shaping, as layer_impl applies it
    c.D = dropout_mask(c.A.rows(), c.A.cols(), attention_dropout(p), *rng);
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
struct BranchCache {
  std::vector<HeadCache> heads;
  Matrix D;
};

// The attention branch Y = D .* (c sum_h A_h V_h + 1 b_O^T) from the heads' caches, as
// attention_layer computes it without residual and normalisation (the order of its sums may differ
// in the last bits); D the output dropout mask (ones without dropout). Dropout draws from `rng`.
Matrix attention_branch(const Matrix& X, const LayerWeights& w, const LayerParams& p, RandomStream* rng,
                        BranchCache& cache) {
  const std::size_t H = w.q.size();
  cache.heads.resize(H);
  Matrix Y = Matrix::Zero(X.rows(), X.cols());
  for (std::size_t h = 0; h < H; ++h) {
    head_forward(X, w, h, p, rng, cache.heads[h]);
    Y.noalias() += cache.heads[h].used(p) * cache.heads[h].V;
  }
  if (p.head_mean && H > 1) Y /= static_cast<double>(H);
  if (!w.q_bias.empty()) Y.rowwise() += w.o_bias;
  cache.D.resize(0, 0);
  if (output_dropout(p) > 0.0) {
    cache.D = dropout_mask(Y.rows(), Y.cols(), output_dropout(p), *rng);
    Y = Y.cwiseProduct(cache.D);
  }
  return Y;
}

// The adjoint of attention_branch from its caches (docs/science/gradients.md, the attention table).
Matrix attention_branch_backward(const Matrix& X, const LayerWeights& w, const LayerParams& p,
                                 const BranchCache& cache, const Matrix& dY_out, BlockGrads& g) {
  const std::size_t H = w.q.size();
  const double head_scale = (p.head_mean && H > 1) ? 1.0 / static_cast<double>(H) : 1.0;
  const double s = 1.0 / std::sqrt(p.d_qk);
  Matrix dX = Matrix::Zero(X.rows(), X.cols());
  const Matrix dY = cache.D.size() ? Matrix(dY_out.cwiseProduct(cache.D)) : dY_out;  // through D .* (.)
  const bool biased = !w.q_bias.empty();
  if (biased) g.dout_bias += dY.colwise().sum();  // Y = ... + 1 b_O^T: db_O = 1^T dY
  for (std::size_t h = 0; h < H; ++h) {
    const HeadCache& c = cache.heads[h];
    const Matrix dYh = head_scale * dY;                  // Y = c sum_h A_h V_h
    const Matrix dV = c.used(p).transpose() * dYh;       // dV_h = A_used,h^T dY
    Matrix dXV = dV;
    if (!w.o.empty()) {
      g.dout[h].noalias() += c.XV.transpose() * dV;      // dW_O = (X W_V)^T dV
      dXV.noalias() = dV * w.o[h].transpose();
    }
    g.dv[h].noalias() += X.transpose() * dXV;            // dW_V = X^T d(X W_V)
    if (biased) g.dv_bias[h] += dXV.colwise().sum();   // db_V = 1^T d(X W_V + 1 b_V^T)
    dX.noalias() += dXV * w.v[h].transpose();
    if (p.hardmax) continue;  // A is piecewise constant in S: no gradient reaches Q and K
    Matrix dA = dYh * c.V.transpose();                   // dA_h = dY V_h^T
    if (c.D.size()) dA = dA.cwiseProduct(c.D);           // A_used = D .* A_s: dA_s = D .* dA_used
    if (p.shape.active()) dA *= p.shape.a;               // A_s = a A + b I - c C: dA = a dA_s
    Matrix dS = p.usa ? usa_backward(c.A, dA, *p.mask) : softmax_backward(c.A, dA, *p.mask);
    dS *= p.qk_norm ? std::sqrt(static_cast<double>(c.Q.cols())) : s;  // through 1/sqrt(d_QK) (sqrt(d_k))
    Matrix dQ = dS * c.K, dK = dS.transpose() * c.Q;     // S' = Q K^T: dQ = dS' K, dK = dS'^T Q
    if (p.qk_norm) {                                     // through the rows s q / |q|
      dQ = scaled_sphere_backward(c.Q_raw, dQ, p.qk_scale);
      dK = scaled_sphere_backward(c.K_raw, dK, p.qk_scale);
    }
    g.dq[h].noalias() += X.transpose() * dQ;
    g.dk[h].noalias() += X.transpose() * dK;
    if (biased) {                                        // db_Q = 1^T dQ, db_K = 1^T dK
      g.dq_bias[h] += dQ.colwise().sum();
      g.dk_bias[h] += dK.colwise().sum();
    }
    dX.noalias() += dQ * w.q[h].transpose();
    dX.noalias() += dK * w.k[h].transpose();
  }
  return dX;
}

}  // namespace

Matrix attention_backward(const Matrix& X, const LayerWeights& w, const LayerParams& p, const Matrix& dY,
                          BlockGrads& g) {
  if (attention_dropout(p) > 0.0 || output_dropout(p) > 0.0)
    throw std::logic_error("attention_backward: dropout needs block_backward's dropout stream");
  BranchCache cache;
  attention_branch(X, w, p, nullptr, cache);  // recompute the heads' activations
  return attention_branch_backward(X, w, p, cache, dY, g);
}

namespace {

const Normalization& norm_at(const LayerWeights& w, const BlockParams& p, int slot) {
  return w.norms_from_file ? w.norms[slot] : *p.layer.norm;
}

Matrix normalised(const Matrix& Y, const Normalization& n) {
  Matrix Z = Y;
  normalize_rows(Z, n);
  return Z;
}

using Branch = std::function<Matrix(const Matrix&)>;                          // F(input)
using BranchBackward = std::function<Matrix(const Matrix&, const Matrix&)>;  // (input, dF) -> d input

// One sub-block (attention or MLP) around the branch F with the normalisations N (slot `main`)
// and N_out (slot `out`) at placement `pos` (kernel/block.hpp). forward() keeps what backward() needs.
// With a skip gain s (residual.skip; post, pre, peri) the residual is s X + a F(.): the adjoint adds
// s dOut (s dZ) instead of dOut (dZ). nGPT's step has its own skip weight 1 - a (s ignored).
// With the LayerNorm scaling c (pre), X + a F(c N(X)): the branch's input adjoint is multiplied by c.
struct SubBlock {
  NormPosition pos;
  double a, s;
  double c = 1.0;  // pre: the LayerNorm scaling of the layer (norm.depth_scaling), c N(X)
  const Normalization &n, &n_out;
  int main, out;
  Matrix Xn, Y, Yn, Z;  // N(X), F(.), N_out(Y), the sum before the last N

  SubBlock(NormPosition pos_, double a_, double s_, const Normalization& n_, const Normalization& n_out_, int main_,
           int out_)
      : pos(pos_), a(a_), s(s_), n(n_), n_out(n_out_), main(main_), out(out_) {}

  Matrix residual(const Matrix& X, const Matrix& F) const {
    return s == 1.0 ? Matrix(X + a * F) : Matrix(s * X + a * F);
  }

  Matrix forward(const Matrix& X, const Branch& F) {
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

  Matrix backward(const Matrix& X, const Matrix& dOut, const BranchBackward& dF, BlockGrads& g) const {
    switch (pos) {
      case NormPosition::post: {
        const Matrix dZ = norm_backward(Z, dOut, n, g.dgain[main], g.dbias[main]);
        if (a == 0.0) return dF(X, dZ);
        return s * dZ + dF(X, a * dZ);
      }
      case NormPosition::pre: {
        Matrix dXn = dF(Xn, a != 0.0 ? Matrix(a * dOut) : dOut);
        if (c != 1.0) dXn *= c;                        // d(c N(X)) = c dN
        Matrix dX = norm_backward(X, dXn, n, g.dgain[main], g.dbias[main]);
        if (a != 0.0) dX += s * dOut;
        return dX;
      }
      case NormPosition::peri: {
        const Matrix dY = norm_backward(Y, a != 0.0 ? Matrix(a * dOut) : dOut, n_out, g.dgain[out], g.dbias[out]);
        Matrix dX = norm_backward(X, dF(Xn, dY), n, g.dgain[main], g.dbias[main]);
        if (a != 0.0) dX += s * dOut;
        return dX;
      }
      case NormPosition::ngpt: {
        const Matrix dZ = norm_backward(Z, dOut, n, g.dgain[main], g.dbias[main]);  // Z = (1 - a) X + a Yn
        const Matrix dY = norm_backward(Y, a * dZ, n_out, g.dgain[out], g.dbias[out]);
        return (1.0 - a) * dZ + dF(X, dY);
      }
    }
    return dOut;
  }
};

void size_grads(const LayerWeights& w, BlockGrads& g) {
  const auto zeros = [](const std::vector<Matrix>& m, std::vector<Matrix>& out) {
    out.clear();
    for (const auto& x : m) out.push_back(Matrix::Zero(x.rows(), x.cols()));
  };
  zeros(w.q, g.dq);
  zeros(w.k, g.dk);
  zeros(w.v, g.dv);
  zeros(w.o, g.dout);
  const auto zero_rows = [](const std::vector<RowVector>& b, std::vector<RowVector>& out) {
    out.clear();
    for (const auto& x : b) out.push_back(RowVector::Zero(x.size()));
  };
  zero_rows(w.q_bias, g.dq_bias);
  zero_rows(w.k_bias, g.dk_bias);
  zero_rows(w.v_bias, g.dv_bias);
  g.dout_bias = RowVector::Zero(w.o_bias.size());
  g.mlp = MlpGrads{};
  const Eigen::Index d = w.q.empty() ? 0 : w.q[0].rows();
  for (int s = 0; s < 4; ++s) {
    g.dgain[s] = RowVector::Zero(d);
    g.dbias[s] = RowVector::Zero(d);
  }
}

}  // namespace

void block_backward(const Matrix& X, const LayerWeights& w, const BlockParams& p, const Matrix& dX_next,
                    BlockGrads& g, RandomStream* dropout) {
  const double p_out = output_dropout(p.layer);
  if ((attention_dropout(p.layer) > 0.0 || p_out > 0.0) && !dropout)
    throw std::logic_error("block_backward: dropout needs the dropout stream of the block");
  if (p.layer.tangent) throw UsageError("gradients: residual.project = tangent is not supported by the backward pass");
  size_grads(w, g);
  static const Normalization identity;
  LayerParams inner = p.layer;  // the attention branch alone: A(.) without residual or normalisation
  inner.alpha = 0.0;
  inner.norm = &identity;
  inner.keep_attention = false;
  BranchCache cache;  // the attention branch's activations, computed once for its adjoint
  const Branch attn = [&](const Matrix& in) { return attention_branch(in, w, inner, dropout, cache); };
  const BranchBackward attn_back = [&](const Matrix& in, const Matrix& dY) {
    return attention_branch_backward(in, w, inner, cache, dY, g);
  };
  const double a = p.layer.alpha;
  const double skip = p.layer.skip;
  SubBlock sa(p.position, a, skip, norm_at(w, p, kNormAttn), norm_at(w, p, kNormAttnOut), kNormAttn, kNormAttnOut);
  sa.c = p.layer.norm_scale;
  const Matrix middle = sa.forward(X, attn);
  Matrix dMiddle = dX_next;
  if (w.mlp_in.size() > 0) {
    MlpWorkspace mws;
    Matrix D;  // the MLP output's dropout mask (block.cpp: dropout on M's output), drawn after the attention's
    const Branch mlp = [&](const Matrix& in) {
      Matrix out;
      mlp_forward(in, w, p.activation, mws, out);
      if (p_out > 0.0) {
        D = dropout_mask(out.rows(), out.cols(), p_out, *dropout);
        out = out.cwiseProduct(D);
      }
      return out;
    };
    const BranchBackward mlp_back = [&](const Matrix& in, const Matrix& dM) {
      return mlp_backward(in, w, p.activation, D.size() ? Matrix(dM.cwiseProduct(D)) : dM, g.mlp);
    };
    SubBlock sm(p.position, mlp_alpha_of(p), mlp_skip_of(p), norm_at(w, p, kNormMlp), norm_at(w, p, kNormMlpOut), kNormMlp, kNormMlpOut);
    sm.c = p.layer.norm_scale;
    sm.forward(middle, mlp);
    dMiddle = sm.backward(middle, dX_next, mlp_back, g);
  }
  g.dX = sa.backward(X, dMiddle, attn_back, g);
}

}  // namespace rcsim
