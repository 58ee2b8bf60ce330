#include "kernel/backward.hpp"
#include "kernel/block_cache.hpp"

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
#include "kernel/tangent.hpp"
#include "kernel/unnormalised_attention.hpp"

namespace rcsim {
namespace bwd {

template <class T>
MatrixT<T> softmax_backward(const MatrixT<T>& A, const MatrixT<T>& dA, const MaskMatrix& mask) {
  // dS_ij = A_ij (dA_ij - sum_k A_ik dA_ik) over the allowed entries, exactly 0 off them.
  using Arr = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic>;
  const Arr allowed = mask.template cast<T>().array();
  const Arr AdA = allowed * A.array() * dA.array();
  const Eigen::Array<T, Eigen::Dynamic, 1> dot = AdA.rowwise().sum();
  return (AdA - allowed * A.array() * dot.replicate(1, A.cols())).matrix();
}

template <class T>
MatrixT<T> usa_backward(const MatrixT<T>& A, const MatrixT<T>& dA, const MaskMatrix& mask) {
  // d exp(S - c)/N = exp(S - c)/N dS on the allowed entries, exactly 0 off them: the same for every
  // constant shift c (attention.usa_normalised), A being the shifted weights.
  return (mask.template cast<T>().array() * A.array() * dA.array()).matrix();
}

namespace {

// Adjoint of xhat = c * inv(c), inv = (||c||^2 / d + eps)^(-1/2):
//   dc = inv (dxhat - xhat (xhat . dxhat) / d).
template <class T>
RowVectorT<T> scaled_backward(const RowVectorT<T>& xhat, T inv, const RowVectorT<T>& dxhat) {
  const T d = static_cast<T>(xhat.size());
  return inv * (dxhat - xhat * (xhat.dot(dxhat) / d));
}

}  // namespace

template <class T>
MatrixT<T> norm_backward(const MatrixT<T>& Y, const MatrixT<T>& dOut, const Normalization& norm, RowVectorT<T>& dgain,
                     RowVectorT<T>& dbias) {
  const Eigen::Index n = Y.rows(), dd = Y.cols();
  const T d = static_cast<T>(dd), tiny = std::numeric_limits<T>::min();
  const T eps = static_cast<T>(norm.eps);
  const RowVectorT<T> gain = norm.gain.template cast<T>();
  if (dgain.size() != dd) dgain = RowVectorT<T>::Zero(dd);
  if (dbias.size() != dd) dbias = RowVectorT<T>::Zero(dd);
  if (norm.type == NormType::none) return dOut;
  MatrixT<T> dY = MatrixT<T>::Zero(n, dd);
  for (Eigen::Index i = 0; i < n; ++i) {
    const RowVectorT<T> y = Y.row(i), g = dOut.row(i);
    switch (norm.type) {
      case NormType::none: break;
      case NormType::sphere: {  // out = y / ||y||: dy = (g - u (u . g)) / ||y||, u = y / ||y||
        const T r = y.norm();
        if (r < tiny) break;
        const RowVectorT<T> u = y / r;
        dY.row(i) = (g - u * u.dot(g)) / r;
        break;
      }
      case NormType::projection:  // out = y - mean(y): dy = g - mean(g)
        dY.row(i) = g.array() - g.mean();
        break;
      case NormType::layernorm: {  // out = gain xhat + b, xhat = c inv, c = y - mean(y)
        dbias += g;
        const RowVectorT<T> c = y.array() - y.mean();
        const T r = c.norm();
        if (r < tiny) break;
        const T inv = inverse_rms<T>(r, d, eps);
        const RowVectorT<T> xhat = c * inv;
        dgain += g.cwiseProduct(xhat);
        const RowVectorT<T> dc = scaled_backward<T>(xhat, inv, g.cwiseProduct(gain));
        dY.row(i) = dc.array() - dc.mean();
        break;
      }
      case NormType::rmsnorm: {  // out = gain xhat, xhat = y inv
        const T r = y.norm();
        if (r < tiny) break;
        const T inv = inverse_rms<T>(r, d, eps);
        const RowVectorT<T> xhat = y * inv;
        dgain += g.cwiseProduct(xhat);
        dY.row(i) = scaled_backward<T>(xhat, inv, g.cwiseProduct(gain));
        break;
      }
    }
  }
  return dY;
}

template <class T>
MatrixT<T> mlp_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, MlpActivation act, const MatrixT<T>& dOut, MlpGradsT<T>& g) {
  // Forward: Z = X W_in + b_in, H = act(Z), M = H W_out + b_out.
  MatrixT<T> Z = X * w.mlp_in;
  if (w.mlp_in_bias.size()) Z.rowwise() += w.mlp_in_bias;
  const MatrixT<T> Hact = Z.unaryExpr([act](T z) { return mlp_activation(z, act); });
  g.d_out = Hact.transpose() * dOut;                           // dW_out = H^T dM
  if (w.mlp_out_bias.size()) g.d_out_bias = dOut.colwise().sum();  // db_out = 1^T dM
  const MatrixT<T> dZ = (dOut * w.mlp_out.transpose()).cwiseProduct(
      Z.unaryExpr([act](T z) { return activation_derivative<T>(z, act); }));  // dZ = (dM W_out^T) .* act'(Z)
  g.d_in = X.transpose() * dZ;                                 // dW_in = X^T dZ
  if (w.mlp_in_bias.size()) g.d_in_bias = dZ.colwise().sum();
  return dZ * w.mlp_in.transpose();                            // dX = dZ W_in^T
}

namespace {

// Adjoint of the rows y -> s y / |y| (QK-normalisation): dy = s (g - u (u . g)) / |y|, u = y / |y|;
// a zero row (left 0 by the forward) gets 0.
template <class T>
MatrixT<T> scaled_sphere_backward(const MatrixT<T>& Y, const MatrixT<T>& G, T s) {
  MatrixT<T> dY = MatrixT<T>::Zero(Y.rows(), Y.cols());
  for (Eigen::Index i = 0; i < Y.rows(); ++i) {
    const T r = Y.row(i).norm();
    if (r == 0.0) continue;
    const RowVectorT<T> u = Y.row(i) / r;
    dY.row(i) = (s / r) * (G.row(i) - u * u.dot(G.row(i)));
  }
  return dY;
}

}  // namespace

template <class T>
MatrixT<T> tangent_backward(const MatrixT<T>& X, const MatrixT<T>& V, const MatrixT<T>& G, MatrixT<T>& dX) {
  // F = P_X(V) row by row, P_x v = v - c x, c = (v . x) / |x|^2 (a zero row of X: F = V).
  //   dv = P_x(g) = g - ((g . x) / |x|^2) x,
  //   dx = -c g - ((g . x) / |x|^2) v + 2 c ((g . x) / |x|^2) x.
  MatrixT<T> dV = G;
  dX = MatrixT<T>::Zero(X.rows(), X.cols());
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    const T xx = X.row(i).squaredNorm();
    if (!(xx > T(0))) continue;
    const T c = V.row(i).dot(X.row(i)) / xx, e = G.row(i).dot(X.row(i)) / xx;
    dV.row(i) -= e * X.row(i);
    dX.row(i) = -c * G.row(i) - e * V.row(i) + (T(2) * c * e) * X.row(i);
  }
  return dV;
}

namespace {

// The adjoint of attention_branch from its caches (docs/science/gradients.md, the attention table).
template <class T>
MatrixT<T> attention_branch_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                                 const BranchCache<T>& cache, const MatrixT<T>& dY_out, BlockGradsT<T>& g) {
  const std::size_t H = w.q.size();
  const T head_scale = (p.head_mean && H > 1) ? T(1) / static_cast<T>(H) : T(1);
  const T s = T(1) / std::sqrt(static_cast<T>(p.d_qk));
  MatrixT<T> dX = MatrixT<T>::Zero(X.rows(), X.cols());
  const MatrixT<T> dY = cache.D.size() ? MatrixT<T>(dY_out.cwiseProduct(cache.D)) : dY_out;  // through D .* (.)
  const bool biased = !w.q_bias.empty();
  if (biased) g.dout_bias += dY.colwise().sum();  // Y = ... + 1 b_O^T: db_O = 1^T dY
  for (std::size_t h = 0; h < H; ++h) {
    const HeadCache<T>& c = cache.heads[h];
    const MatrixT<T> dYh = head_scale * dY;                  // Y = c sum_h A_h V_h
    const MatrixT<T> dV = c.used(p).transpose() * dYh;       // dV_h = A_used,h^T dY
    MatrixT<T> dXV = dV;
    if (!w.o.empty()) {
      g.dout[h].noalias() += c.XV.transpose() * dV;      // dW_O = (X W_V)^T dV
      dXV.noalias() = dV * w.o[h].transpose();
    }
    g.dv[h].noalias() += X.transpose() * dXV;            // dW_V = X^T d(X W_V)
    if (biased) g.dv_bias[h] += dXV.colwise().sum();   // db_V = 1^T d(X W_V + 1 b_V^T)
    dX.noalias() += dXV * w.v[h].transpose();
    if (p.hardmax) continue;  // A is piecewise constant in S: no gradient reaches Q and K
    if (p.random_markov) continue;  // A = softmax(G_h) does not depend on X: dW_Q = dW_K = 0 exactly
    MatrixT<T> dA = dYh * c.V.transpose();                   // dA_h = dY V_h^T
    if (c.D.size()) dA = dA.cwiseProduct(c.D);           // A_used = D .* A_s: dA_s = D .* dA_used
    if (p.shape.active()) dA *= static_cast<T>(p.shape.a);               // A_s = a A + b I - c C: dA = a dA_s
    MatrixT<T> dS = p.usa ? usa_backward(c.A, dA, *p.mask) : softmax_backward(c.A, dA, *p.mask);
    dS *= p.qk_norm ? std::sqrt(static_cast<T>(c.Q.cols())) : s;  // through 1/sqrt(d_QK) (sqrt(d_k))
    MatrixT<T> dQ = dS * c.K, dK = dS.transpose() * c.Q;     // S' = Q K^T: dQ = dS' K, dK = dS'^T Q
    if (p.qk_norm) {                                     // through the rows s q / |q|
      dQ = scaled_sphere_backward<T>(c.Q_raw, dQ, static_cast<T>(p.qk_scale));
      dK = scaled_sphere_backward<T>(c.K_raw, dK, static_cast<T>(p.qk_scale));
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

template <class T>
MatrixT<T> attention_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p, const MatrixT<T>& dY,
                          BlockGradsT<T>& g) {
  if (attention_dropout(p) > 0.0 || output_dropout(p) > 0.0)
    throw std::logic_error("attention_backward: dropout needs block_backward's dropout stream");
  BranchCache<T> cache;
  attention_branch(X, w, p, nullptr, cache);  // recompute the heads' activations
  return attention_branch_backward(X, w, p, cache, dY, g);
}

namespace {

template <class T>
void size_grads(const LayerWeightsT<T>& w, BlockGradsT<T>& g) {
  const auto zeros = [](const std::vector<MatrixT<T>>& m, std::vector<MatrixT<T>>& out) {
    out.clear();
    for (const auto& x : m) out.push_back(MatrixT<T>::Zero(x.rows(), x.cols()));
  };
  zeros(w.q, g.dq);
  zeros(w.k, g.dk);
  zeros(w.v, g.dv);
  zeros(w.o, g.dout);
  const auto zero_rows = [](const std::vector<RowVectorT<T>>& b, std::vector<RowVectorT<T>>& out) {
    out.clear();
    for (const auto& x : b) out.push_back(RowVectorT<T>::Zero(x.size()));
  };
  zero_rows(w.q_bias, g.dq_bias);
  zero_rows(w.k_bias, g.dk_bias);
  zero_rows(w.v_bias, g.dv_bias);
  g.dout_bias = RowVectorT<T>::Zero(w.o_bias.size());
  g.mlp = MlpGradsT<T>{};
  const Eigen::Index d = w.q.empty() ? 0 : w.q[0].rows();
  for (int s = 0; s < 4; ++s) {
    g.dgain[s] = RowVectorT<T>::Zero(d);
    g.dbias[s] = RowVectorT<T>::Zero(d);
  }
}

}  // namespace

namespace {

// dynamics.integrator = rk4 (kernel/layer.cpp rk4_impl; post, no MLP, no dropout): with the field
// F(Z) = A(Z) (P_Z(A(Z)) with residual.project = tangent), A the attention branch alone,
//   k1 = F(X), k2 = F(X + dt/2 k1), k3 = F(X + dt/2 k2), k4 = F(X + dt k3),
//   out = N(X + dt/6 (k1 + 2 k2 + 2 k3 + k4)).
// Adjoint (dS = N^T(dout)): dk1 = dk4 = dt/6 dS, dk2 = dk3 = dt/3 dS, dX = dS; then stage by stage
// from the last, dZ_i = F^T(Z_i, dk_i), dX += dZ_i and dk_{i-1} += c_i dZ_i (c = dt/2, dt/2, dt);
// the weights' gradients summed over the four stages.
template <class T>
struct Rk4Step {
  const LayerWeightsT<T>& w;
  const LayerParams& inner;  // the attention branch alone
  bool tangent;
  const Normalization& n;
  T dt;
  BranchCache<T> cache[4];
  MatrixT<T> Z[4], A[4], S;  // the stage points, the branch outputs before the projection, the sum

  MatrixT<T> field(int i) {  // k_i = F(Z_i)
    A[i] = attention_branch<T>(Z[i], w, inner, nullptr, cache[i]);
    if (!tangent) return A[i];
    MatrixT<T> k = A[i];
    project_tangent(Z[i], k);
    return k;
  }
  MatrixT<T> forward(const MatrixT<T>& X) {
    Z[0] = X;
    const MatrixT<T> k1 = field(0);
    Z[1] = X + (dt / T(2)) * k1;
    const MatrixT<T> k2 = field(1);
    Z[2] = X + (dt / T(2)) * k2;
    const MatrixT<T> k3 = field(2);
    Z[3] = X + dt * k3;
    const MatrixT<T> k4 = field(3);
    S = X + (dt / T(6)) * (k1 + T(2) * k2 + T(2) * k3 + k4);
    return normalised(S, n);
  }
  MatrixT<T> backward(const MatrixT<T>& dOut, BlockGradsT<T>& g) {
    const MatrixT<T> dS = norm_backward<T>(S, dOut, n, g.dgain[kNormAttn], g.dbias[kNormAttn]);
    MatrixT<T> dk[4] = {(dt / T(6)) * dS, (dt / T(3)) * dS, (dt / T(3)) * dS, (dt / T(6)) * dS};
    MatrixT<T> dX = dS;
    const T step[4] = {T(0), dt / T(2), dt / T(2), dt};  // Z_i = X + step_i k_{i-1}
    for (int i = 3; i >= 0; --i) {
      MatrixT<T> dZ, dA = dk[i];
      if (tangent) {  // k_i = P_{Z_i}(A_i): through both arguments
        MatrixT<T> dZp;
        dA = tangent_backward<T>(Z[i], A[i], dk[i], dZp);
        dZ = attention_branch_backward<T>(Z[i], w, inner, cache[i], dA, g) + dZp;
      } else {
        dZ = attention_branch_backward<T>(Z[i], w, inner, cache[i], dA, g);
      }
      dX += dZ;
      if (i > 0) dk[i - 1] += step[i] * dZ;
    }
    return dX;
  }
};

}  // namespace

template <class T>
void block_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p, const MatrixT<T>& dX_next,
                    BlockGradsT<T>& g, RandomStream* dropout, RandomStream* noise) {
  const double p_out = output_dropout(p.layer);
  if ((attention_dropout(p.layer) > 0.0 || p_out > 0.0) && !dropout)
    throw std::logic_error("block_backward: dropout needs the dropout stream of the block");
  const bool noisy = p.noise && p.noise->scale > 0.0;
  if (noisy && !noise) throw std::logic_error("block_backward: dynamics.noise needs the noise stream of the block");
  size_grads(w, g);
  static const Normalization identity;
  LayerParams inner = p.layer;  // the attention branch alone: A(.) without residual or normalisation
  inner.alpha = 0.0;
  inner.norm = &identity;
  inner.keep_attention = false;
  inner.tangent = false;
  inner.rk4 = false;
  const bool tangent = p.layer.tangent;  // residual.project = tangent (post, no MLP): F(X) = P_X(A(X))
  // The block's output before the noise, and the adjoint of the noise step: with dynamics.noise,
  // X_next = P(out + scale G) in double (run_trial), G drawn from (a copy of) the block's noise stream.
  const auto through_noise = [&](const MatrixT<T>& out) -> MatrixT<T> {
    if (!noisy) return dX_next;
    Matrix G(out.rows(), out.cols());
    noise->fill_normal(G);
    Matrix y = out.template cast<double>();
    y += p.noise->scale * G;
    RowVector dgain, dbias;  // the noise's P (none or sphere) has no parameters
    return norm_backward<double>(y, dX_next.template cast<double>(), *p.noise->norm, dgain, dbias).template cast<T>();
  };
  if (p.layer.rk4) {  // one RK4 step of the attention flow (post, no MLP, no dropout: config)
    Rk4Step<T> step{w, inner, tangent, norm_at(w, p, kNormAttn), static_cast<T>(p.layer.alpha), {}, {}, {}, {}};
    const MatrixT<T> out = step.forward(X);
    g.dX = step.backward(through_noise(out), g);
    return;
  }
  BranchCache<T> cache;  // the attention branch's activations, computed once for its adjoint
  MatrixT<T> A_out;      // tangent: the branch output before the projection
  const Branch<T> attn = [&](const MatrixT<T>& in) {
    MatrixT<T> Y = attention_branch(in, w, inner, dropout, cache);
    if (!tangent) return Y;
    A_out = Y;
    project_tangent(in, Y);
    return Y;
  };
  const BranchBackward<T> attn_back = [&](const MatrixT<T>& in, const MatrixT<T>& dY) {
    if (!tangent) return attention_branch_backward(in, w, inner, cache, dY, g);
    MatrixT<T> dIn;  // F = P_in(A(in)): the projection's adjoint in its vector and in its point
    const MatrixT<T> dA = tangent_backward<T>(in, A_out, dY, dIn);
    return MatrixT<T>(attention_branch_backward(in, w, inner, cache, dA, g) + dIn);
  };
  const double a = p.layer.alpha;
  const double skip = p.layer.skip;
  SubBlock<T> sa(p.position, a, skip, norm_at(w, p, kNormAttn), norm_at(w, p, kNormAttnOut), kNormAttn, kNormAttnOut);
  sa.c = static_cast<T>(p.layer.norm_scale);
  const MatrixT<T> middle = sa.forward(X, attn);
  MatrixT<T> dMiddle;
  if (w.mlp_in.size() > 0) {
    MlpWorkspaceT<T> mws;
    MatrixT<T> D;  // the MLP output's dropout mask (block.cpp: dropout on M's output), drawn after the attention's
    const Branch<T> mlp = [&](const MatrixT<T>& in) {
      MatrixT<T> out;
      mlp_forward(in, w, p.activation, mws, out);
      if (p_out > 0.0) {
        D = dropout_mask<T>(out.rows(), out.cols(), p_out, *dropout);
        out = out.cwiseProduct(D);
      }
      return out;
    };
    const BranchBackward<T> mlp_back = [&](const MatrixT<T>& in, const MatrixT<T>& dM) {
      return mlp_backward(in, w, p.activation, D.size() ? MatrixT<T>(dM.cwiseProduct(D)) : dM, g.mlp);
    };
    SubBlock<T> sm(p.position, mlp_alpha_of(p), mlp_skip_of(p), norm_at(w, p, kNormMlp), norm_at(w, p, kNormMlpOut),
                   kNormMlp, kNormMlpOut);
    sm.c = static_cast<T>(p.layer.norm_scale);
    const MatrixT<T> out = sm.forward(middle, mlp);
    dMiddle = sm.backward(middle, through_noise(out), mlp_back, g);
  } else {
    dMiddle = through_noise(middle);
  }
  g.dX = sa.backward(X, dMiddle, attn_back, g);
}

}  // namespace bwd

Matrix softmax_backward(const Matrix& A, const Matrix& dA, const MaskMatrix& mask) {
  return bwd::softmax_backward<double>(A, dA, mask);
}
Matrix usa_backward(const Matrix& A, const Matrix& dA, const MaskMatrix& mask) {
  return bwd::usa_backward<double>(A, dA, mask);
}
Matrix norm_backward(const Matrix& Y, const Matrix& dOut, const Normalization& norm, RowVector& dgain,
                     RowVector& dbias) {
  return bwd::norm_backward<double>(Y, dOut, norm, dgain, dbias);
}
MatrixF norm_backward(const MatrixF& Y, const MatrixF& dOut, const Normalization& norm, RowVectorT<float>& dgain,
                      RowVectorT<float>& dbias) {
  return bwd::norm_backward<float>(Y, dOut, norm, dgain, dbias);
}
Matrix mlp_backward(const Matrix& X, const LayerWeights& w, MlpActivation act, const Matrix& dOut, MlpGrads& g) {
  return bwd::mlp_backward<double>(X, w, act, dOut, g);
}
Matrix attention_backward(const Matrix& X, const LayerWeights& w, const LayerParams& p, const Matrix& dY,
                          BlockGrads& g) {
  return bwd::attention_backward<double>(X, w, p, dY, g);
}
Matrix tangent_backward(const Matrix& X, const Matrix& V, const Matrix& G, Matrix& dX) {
  return bwd::tangent_backward<double>(X, V, G, dX);
}

void block_backward(const MatrixF& X, const LayerWeightsT<float>& w, const BlockParams& p, const MatrixF& dX_next,
                    BlockGradsT<float>& g, RandomStream* dropout, RandomStream* noise) {
  bwd::block_backward<float>(X, w, p, dX_next, g, dropout, noise);
}

namespace {
std::vector<Matrix> widen(const std::vector<MatrixF>& v) {
  std::vector<Matrix> out;
  out.reserve(v.size());
  for (const auto& m : v) out.push_back(m.cast<double>());
  return out;
}
std::vector<RowVector> widen(const std::vector<RowVectorT<float>>& v) {
  std::vector<RowVector> out;
  out.reserve(v.size());
  for (const auto& m : v) out.push_back(m.cast<double>());
  return out;
}
}  // namespace

void widen_grads(const BlockGradsT<float>& f, BlockGrads& g) {
  g.dX = f.dX.cast<double>();
  g.dq = widen(f.dq);
  g.dk = widen(f.dk);
  g.dv = widen(f.dv);
  g.dout = widen(f.dout);
  g.dq_bias = widen(f.dq_bias);
  g.dk_bias = widen(f.dk_bias);
  g.dv_bias = widen(f.dv_bias);
  g.dout_bias = f.dout_bias.cast<double>();
  g.mlp.d_in = f.mlp.d_in.cast<double>();
  g.mlp.d_out = f.mlp.d_out.cast<double>();
  g.mlp.d_in_bias = f.mlp.d_in_bias.cast<double>();
  g.mlp.d_out_bias = f.mlp.d_out_bias.cast<double>();
  for (int s = 0; s < 4; ++s) {
    g.dgain[s] = f.dgain[s].cast<double>();
    g.dbias[s] = f.dbias[s].cast<double>();
  }
}

void block_backward(const Matrix& X, const LayerWeights& w, const BlockParams& p, const Matrix& dX_next,
                    BlockGrads& g, RandomStream* dropout, RandomStream* noise) {
  if (!p.single) {
    bwd::block_backward<double>(X, w, p, dX_next, g, dropout, noise);
    return;
  }
  // run.precision = float32: the block's adjoint in float on the tokens, weights and cotangent
  // rounded to float (X holds float values exactly: the forward's tokens), widened afterwards.
  LayerWeightsT<float> wf;
  cast_weights(w, wf);
  BlockGradsT<float> gf;
  bwd::block_backward<float>(X.cast<float>(), wf, p, dX_next.cast<float>(), gf, dropout, noise);
  widen_grads(gf, g);
}

}  // namespace rcsim
