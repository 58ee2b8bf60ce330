#include "kernel/block/layer.hpp"

#include <algorithm>
#include <cmath>

#include "kernel/block/attention_statistics.hpp"
#include "kernel/block/attention_kernel.hpp"
#include "kernel/ops/attention_weights.hpp"
#include "kernel/ops/differential_attention.hpp"
#include "kernel/ops/logit_softcap.hpp"
#include "kernel/ops/qk_transforms.hpp"
#include "kernel/ops/tangent_projection.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace rcsim {

void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

void fix_product_blocking() { Eigen::setCpuCacheSizes(48 * 1024, 1280 * 1024, 32 * 1024 * 1024); }

// Every work matrix is sized on first use (the cpu platform's layer never uses XV: an N x d
// matrix less at long context), then reused.
template <class T>
LayerWorkspaceT<T>::LayerWorkspaceT(int n, int d, int dk) {
  (void)n, (void)d, (void)dk;
}
template struct LayerWorkspaceT<double>;
template struct LayerWorkspaceT<float>;

LayerParams layer_params(const ModelSpec& c, const MaskMatrix* mask, const Normalization* norm) {
  LayerParams p{mask, c.model.d_qk, c.residual_alpha, norm};
  p.attention = c.attention;  // kind, shaping, logit bias, QK-normalisation, soft-capping
  if (p.usa() && c.attention.usa_normalised) p.usa_shift = 1.0 / std::sqrt(c.model.d_qk);  // beta, as the logits' scale
  p.speed = c.dynamics_speed;  // docs/science/particles.md section 6
  p.merge_distance = c.merge_distance;
  p.head_mean = c.model.head_mix == HeadMix::mean;
  p.project = c.residual_project;
  p.integrator = c.integrator;
  p.skip = c.residual_skip;  // variants (docs/science/gradients.md)
  if (c.residual_depth_scaling == ResidualDepthScaling::inv_sqrt_depth)  // branch gain alpha / sqrt(L)
    p.alpha = c.residual_alpha / std::sqrt(static_cast<double>(c.model.layers));
  return p;
}

namespace {

// A <- a A + b I - c C on the allowed entries (general path: any mask).
template <class T>
void shape_masked(Eigen::Ref<MatrixT<T>> A, const MaskMatrix& mask, const AttentionShape& s) {
  const T a = static_cast<T>(s.a), b = static_cast<T>(s.b);
  for (Eigen::Index i = 0; i < A.rows(); ++i) {
    const T uniform = static_cast<T>(s.c) / static_cast<T>(mask.row(i).count());  // c / |N_i|
    for (Eigen::Index j = 0; j < A.cols(); ++j)
      if (mask(i, j)) A(i, j) = a * A(i, j) - uniform;
    A(i, i) += b;
  }
}

// The same on the fast path: row i's allowed entries are the range [lo_i, hi_i) (rows.contiguous).
template <class T>
void shape_rows(RowMajorMatrixT<T>& A, const MaskRows& rows, const AttentionShape& s) {
  const T a = static_cast<T>(s.a), b = static_cast<T>(s.b);
  for (Eigen::Index i = 0; i < A.rows(); ++i) {
    const auto ui = static_cast<std::size_t>(i);
    const Eigen::Index lo = rows.lo[ui], n = rows.hi[ui] - rows.lo[ui];
    const T uniform = static_cast<T>(s.c) / static_cast<T>(n);
    A.row(i).segment(lo, n) = a * A.row(i).segment(lo, n).array() - uniform;
    A(i, i) += b;
  }
}

// S <- S + B_h, B_ij = -m_h |i - j| (the bias evaluated in double, then rounded to T).
template <class T>
void add_logit_bias_impl(Eigen::Ref<MatrixT<T>> S, const LogitBias& b, std::size_t h, std::size_t H) {
  const double m = logit_bias_slope(b, h, H);
  for (Eigen::Index j = 0; j < S.cols(); ++j)
    for (Eigen::Index i = 0; i < S.rows(); ++i)
      S(i, j) += static_cast<T>(-m * static_cast<double>(i > j ? i - j : j - i));
}

// X_next = a X + alpha Y (a = p.skip; X + alpha Y exactly as before when a = 1).
template <class T>
void add_residual(const Eigen::Ref<const MatrixT<T>>& X, const LayerParams& p, const MatrixT<T>& Y,
                  MatrixT<T>& X_next) {
  if (p.skip == 1.0)
    X_next = X + static_cast<T>(p.alpha) * Y;
  else
    X_next = static_cast<T>(p.skip) * X + static_cast<T>(p.alpha) * Y;
}

// The logits of head h on the general path into ws.S: random-Markov G_h, or (X W_Q + b_Q)(X W_K + b_K)^T
// / sqrt(d_QK) (QK-normalised: sqrt(d_k) Q_n K_n^T), plus the additive logit bias. With a cache,
// Q and K (and their projections before QK-normalisation) are kept.
template <class T>
void general_logits(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                    std::size_t h, LayerWorkspaceT<T>& ws, HeadCacheT<T>* c) {
  if (p.random_markov())
    ws.S = w.logits[h];  // independent of X
  else if (!w.q_bias.empty())
    attention_logits(X, w.q[h], &w.q_bias[h], w.k[h], &w.k_bias[h], p.d_qk, ws.Q, ws.K, ws.S);
  else
    attention_logits(X, w.q[h], w.k[h], p.d_qk, ws.Q, ws.K, ws.S);
  // The Q/K transforms in their order (QK-normalisation, rotary embedding, ...: kernel/ops/qk_transforms.hpp),
  // then the logits again.
  if (!p.random_markov() && qk_transforms_forward<T>(p.attention, h, ws.Q, ws.K, c)) {
    const double scale = p.attention.qk_norm ? std::sqrt(static_cast<double>(ws.Q.cols())) : 1.0 / std::sqrt(p.d_qk);
    ws.S.noalias() = ws.Q * ws.K.transpose();
    ws.S *= static_cast<T>(scale);
  }
  if (c && !p.random_markov()) c->Q = ws.Q, c->K = ws.K;
  if (p.attention.logit_bias.active()) add_logit_bias(ws.S, p.attention.logit_bias, w, h);
  if (p.attention.logit_softcap > 0.0) {
    softcap_logits<T>(ws.S, p.attention.logit_softcap);
    if (c) c->Sc = ws.S;
  }
}

// The attention weights of head h into ws.S_rows (fast) or ws.S (general), shaped, added to
// attention_mean, dropped out; returns the statistics of the weights before shaping and dropout.
template <class T>
AttentionStats head_weights(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                            std::size_t h, bool fast, LayerWorkspaceT<T>& ws, HeadCacheT<T>* c, HeadRowSums* sums) {
  const bool lower = ws.rows.lower_triangular;
  AttentionStats s;
  if (fast) {
    attention_logits_fast(X, w.q[h], w.k[h], p.d_qk, lower, ws.logits, ws.S_rows);
    s = softmax_rows(ws.S_rows, ws.rows, ws.buffer);
  } else {
    general_logits<T>(X, w, p, h, ws, c);
    if (p.attention.differential) {  // A1 - lambda A2 from the halves of Q and K
      s = differential_weights<T>(ws.Q, ws.K, p, ws.S, c);
    } else {
      if (c && attention_weights_need_logits(p.attention.kind)) c->S = ws.S;
      attention_weights<T>(p.attention.kind, ws.S, *p.mask, p.usa_shift);
      s = attention_stats(ws.S, *p.mask);
    }
    if (c) c->A = ws.S;
  }
  if (sums) *sums = fast ? head_row_sums(ws.S_rows, ws.rows) : head_row_sums(ws.S, ws.rows);
  if (p.attention.shape.active()) {  // shaped attention, after the statistics of softmax(S)
    if (fast)
      shape_rows<T>(ws.S_rows, ws.rows, p.attention.shape);
    else
      shape_masked<T>(ws.S, *p.mask, p.attention.shape);
    if (c) c->As = ws.S;
  }
  if (p.keep_attention) {
    if (!fast)
      ws.attention_mean += ws.S.template cast<double>();
    else if (lower)
      ws.attention_mean.template triangularView<Eigen::Lower>() += ws.S_rows.template cast<double>();
    else
      ws.attention_mean += ws.S_rows.template cast<double>();
  }
  // Dropout (transformer blocks) after the attention statistics and the peer measures' mean attention.
  if (p.dropout && p.dropout->attention > 0.0) {
    if (fast) {
      apply_dropout(ws.S_rows, p.dropout->attention, *p.dropout->rng);
    } else {
      apply_dropout<T>(ws.S, p.dropout->attention, *p.dropout->rng, c ? &c->D : nullptr);
      if (c) c->Ad = ws.S;
    }
  }
  return s;
}

// dynamics.speed = unit with residual.project = tangent: Y_i += sum_k A_ik (v_k - v_i) + r_i P_{x_i}(v_i -+ x_i),
// r_i = sum_k A_ik, the sign that of <v_i, x_i>: P_{x_i}((A V)_i), as P_x(x) = 0, summed so that the tangent
// projection that follows does not cancel a radial part of order 1 against a field of order 1e-60 (the
// unit-speed step divides by |F|, which must keep its relative accuracy). Exact zeros by construction, on any
// machine: coincident tokens contribute exactly 0, and with W_V = +-I (v_i = +-x_i bitwise) the self term is
// P(0) = 0. (P_{x_i}(v_i) itself is 0 only when v.x / x.x rounds to 1, which depends on the instructions: an
// AVX2 build left a residue there that carried the staircase's step at beta = 4000, issue 46; the plain
// product leaves ~1e-17 |A V| in F.)
template <class T>
void add_difference_product(const Eigen::Ref<const MatrixT<T>>& X, const MatrixT<T>& A, const MatrixT<T>& V,
                            MatrixT<T>& Y) {
  for (Eigen::Index i = 0; i < A.rows(); ++i) {
    RowVectorT<T> acc = RowVectorT<T>::Zero(V.cols());
    T r = T(0);
    for (Eigen::Index k = 0; k < A.cols(); ++k) {
      if (A(i, k) == T(0)) continue;
      acc += A(i, k) * (V.row(k) - V.row(i));
      r += A(i, k);
    }
    const RowVectorT<T> x = X.row(i);
    RowVectorT<T> pv = V.row(i);
    if (pv.dot(x) >= T(0))  // the nearer of +-x_i: W_V = +-I gives pv = 0 exactly
      pv -= x;
    else
      pv += x;
    const T xx = x.dot(x);
    if (xx > T(0)) pv -= (pv.dot(x) / xx) * x;
    Y.row(i) += acc + r * pv;
  }
}

// The reference platform's heads: for each head its N x N attention (the fast path on range masks,
// else the general path, always with a cache), shaped, kept (attention_mean), dropped out, times
// V_h, summed into Y (overwritten when `direct`). Returns the smallest weight and the entropy
// averaged over heads.
template <class T>
AttentionStats reference_heads(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                               bool biased, bool direct, LayerWorkspaceT<T>& ws, MatrixT<T>& Y, LayerCacheT<T>* cache) {
  const std::size_t H = w.q.size();
  // The fast path: plain softmax logits (AttentionSettings::needs_general_path, which the fused
  // platforms ask too), row-range masks, no projection biases, no cache, not the truth of the
  // platform conformance test (general_path).
  const bool fast = !cache && !p.general_path && ws.rows.contiguous && !p.attention.needs_general_path() && !biased &&
                    !p.unit_speed();
  const bool lower = ws.rows.lower_triangular;
  AttentionStats heads;
  double entropy = 0.0;
  if (p.keep_attention) ws.attention_mean.setZero(X.rows(), X.rows());
  for (std::size_t h = 0; h < H; ++h) {
    HeadCacheT<T>* c = cache ? &cache->heads[h] : nullptr;
    HeadRowSums sums;
    const AttentionStats s = head_weights<T>(X, w, p, h, fast, ws, c, p.attention_statistics ? &sums : nullptr);
    heads.min_weight = std::min(heads.min_weight, s.min_weight);
    entropy += s.mean_entropy;
    if (p.attention_statistics) add_head_statistics(heads, sums, X.rows());
    ws.XV.noalias() = X * w.v[h];
    if (biased) ws.XV.rowwise() += w.v_bias[h];  // V_h = X W_V,h + 1 b_V,h^T
    if (!w.o.empty()) ws.XVO.noalias() = ws.XV * w.o[h];  // model.value_dim: X W_V,h W_O,h
    const MatrixT<T>& V = w.o.empty() ? ws.XV : ws.XVO;
    if (c) c->XV = ws.XV, c->V = V;
    if (p.attention.diff_head_norm) {  // s RMSNorm(A X W_V) W_O (s: diff_head_scale, ops/differential_attention.hpp)
      add_normalised_head<T>(ws.S, ws.XV, w, h, p, direct, Y, c);
    } else if (!fast && p.unit_speed() && p.tangent() && !direct) {
      add_difference_product<T>(X, ws.S, V, Y);
    } else if (!fast) {
      if (direct)
        Y.noalias() = ws.S * V;
      else
        Y.noalias() += ws.S * V;
    } else if (lower) {
      if (direct)
        Y.noalias() = ws.S_rows.template triangularView<Eigen::Lower>() * V;
      else
        Y.noalias() += ws.S_rows.template triangularView<Eigen::Lower>() * V;
    } else {
      if (direct)
        Y.noalias() = ws.S_rows * V;
      else
        Y.noalias() += ws.S_rows * V;
    }
  }
  heads.mean_entropy = entropy / static_cast<double>(H);
  if (p.attention_statistics) finish_head_statistics(heads, H);
  if (p.keep_attention) ws.attention_mean /= static_cast<double>(H);
  return heads;
}

// dynamics.speed = unit: Y <- Y / |Y|_F (the step's arc length is then alpha); Y = 0 stays 0.
template <class T>
void unit_speed(MatrixT<T>& Y) {
  const T norm = Y.norm();
  if (norm > T(0)) Y /= norm;
}

// dynamics.merge_distance: for i < j in order, x_j <- x_i when |x_j - x_i| < tol (bitwise equal tokens
// then stay equal: they receive the same field). The stand-in for a collapse that a fixed step resolves
// only by chattering about it (the merge rule of Geshkovski, Koubbi et al.'s staircase script).
template <class T>
void merge_close_tokens(MatrixT<T>& X, double tol) {
  const T tol2 = static_cast<T>(tol * tol);
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (Eigen::Index j = i + 1; j < X.rows(); ++j)
      if ((X.row(j) - X.row(i)).squaredNorm() < tol2) X.row(j) = X.row(i);
}

AttentionStats run_kernel(const AttentionKernel& k, const Eigen::Ref<const Matrix>& X, const LayerWeights& w,
                          const LayerParams& p, const MaskRows& rows, Matrix& Y) {
  return k.attention(X, w, p.d_qk, rows, p.threads, p.attention_statistics, Y);
}
AttentionStats run_kernel(const AttentionKernel& k, const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w,
                          const LayerParams& p, const MaskRows& rows, MatrixF& Y) {
  return k.attention_float(X, w, p.d_qk, rows, p.threads, p.attention_statistics, Y);
}

template <class T>
LayerReport layer_impl(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                       LayerWorkspaceT<T>& ws, MatrixT<T>& X_next, LayerCacheT<T>* cache) {
  LayerReport report;
  const std::size_t H = w.q.size();
  if (cache) *cache = LayerCacheT<T>{std::vector<HeadCacheT<T>>(H), {}, {}, {}, {}, {}};
  const void* mask_key = p.rows ? static_cast<const void*>(p.rows) : p.mask;
  if (ws.analysed != mask_key) {
    ws.rows = p.rows ? *p.rows : analyse_rows(*p.mask);
    ws.analysed = mask_key;
  }
  const bool biased = !w.q_bias.empty();  // attention.bias: the general path
  // One head without residual: the product goes straight into X_next.
  const bool direct = H == 1 && p.alpha == 0.0;
  MatrixT<T>& Y = direct ? X_next : ws.Y;
  Y.resize(X.rows(), X.cols());
  if (!direct) Y.setZero();
  // A platform's kernel (attention_kernel.hpp: every head without the N x N matrix) where it applies.
  if (!cache && p.kernel && kernel_applies(*p.kernel, p, biased, ws.rows))
    report.attention = run_kernel(*p.kernel, X, w, p, ws.rows, Y);
  else
    report.attention = reference_heads<T>(X, w, p, biased, direct, ws, Y, cache);
  if (p.head_mean && H > 1) Y /= static_cast<T>(H);
  if (biased) Y.rowwise() += w.o_bias;  // attention.bias: + 1 b_O^T
  if (p.dropout && p.dropout->output > 0.0)
    apply_dropout<T>(Y, p.dropout->output, *p.dropout->rng, cache ? &cache->D : nullptr);
  if (p.tangent() && !direct) {  // (direct: no residual, so no step to project)
    if (cache) cache->F = ws.Y;
    project_tangent(X, ws.Y);
  }
  if (p.unit_speed() && !direct) unit_speed<T>(ws.Y);
  if (!direct) {
    if (p.alpha != 0.0) {
      add_residual<T>(X, p, ws.Y, X_next);
    } else {
      X_next = ws.Y;
    }
  }
  if (cache) cache->Z = X_next;
  report.degenerate_rows = normalize_rows(X_next, *p.norm);
  if (p.merge_distance > 0.0) merge_close_tokens<T>(X_next, p.merge_distance);
  return report;
}

// The vector field of the particle flow (docs/science/particles.md):
//   F(Z)_i = P_{z_i}( sum_h (A_h(Z) Z W_V,h)_i )  with tangent,  sum_h (A_h(Z) Z W_V,h)_i  without,
// evaluated by layer_impl without residual and normalisation. `f` is that layer's parameters.
template <class T>
AttentionStats flow_field(const MatrixT<T>& Z, const LayerWeightsT<T>& w, const LayerParams& f, bool tangent,
                          LayerWorkspaceT<T>& ws, MatrixT<T>& out, LayerCacheT<T>* stage) {
  const LayerReport r = layer_impl<T>(Z, w, f, ws, out, stage);
  if (tangent) project_tangent(Z, out);
  return r.attention;
}

// dt L for one RK4 step, L = |k4 - k3| / |Z4 - Z3| (Z4 - Z3 = dt k3 - dt/2 k2) the field's Lipschitz
// constant between its last two stage points (Hairer and Wanner's stiffness detection, Solving ODEs
// II, section IV.2); 0 when the points coincide.
template <class T>
double rk4_stiffness(const MatrixT<T>& k2, const MatrixT<T>& k3, const MatrixT<T>& k4, T dt) {
  const double dz = (dt * k3 - (dt / T(2)) * k2).template cast<double>().norm();
  return dz > 0.0 ? static_cast<double>(dt) * (k4 - k3).template cast<double>().norm() / dz : 0.0;
}

// One classical RK4 step of size dt = alpha (dynamics.integrator = rk4):
//   k1 = F(X), k2 = F(X + dt/2 k1), k3 = F(X + dt/2 k2), k4 = F(X + dt k3),
//   X_next = normalise(X + dt/6 (k1 + 2 k2 + 2 k3 + k4)).
// The attention diagnostics (and attention_mean) are those of the first stage, at X. A cache keeps
// each stage's (its Z: the field before the projection), the stage points and the sum.
template <class T>
LayerReport rk4_impl(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                     LayerWorkspaceT<T>& ws, MatrixT<T>& X_next, LayerCacheT<T>* cache) {
  if (cache) {
    *cache = LayerCacheT<T>{};
    cache->stages.resize(4);
  }
  const auto stage = [cache](int i) { return cache ? &cache->stages[static_cast<std::size_t>(i)] : nullptr; };
  const auto point = [cache](const MatrixT<T>& Z) {
    if (cache) cache->points.push_back(Z);
  };
  static const Normalization identity;  // type none
  LayerParams f = p;
  f.integrator = Integrator::euler;
  f.speed = DynamicsSpeed::field;  // refused with rk4 (config); the stages are the plain field
  f.merge_distance = 0.0;
  f.alpha = 0.0;
  f.project = ResidualProject::none;
  f.norm = &identity;
  const T dt = static_cast<T>(p.alpha);
  LayerReport report;
  ws.Z = X;
  point(ws.Z);
  report.attention = flow_field<T>(ws.Z, w, f, p.tangent(), ws, ws.k1, stage(0));
  f.keep_attention = false;  // attention_mean stays the first stage's
  ws.Z = X + (dt / T(2)) * ws.k1;
  point(ws.Z);
  flow_field<T>(ws.Z, w, f, p.tangent(), ws, ws.k2, stage(1));
  ws.Z = X + (dt / T(2)) * ws.k2;
  point(ws.Z);
  flow_field<T>(ws.Z, w, f, p.tangent(), ws, ws.k3, stage(2));
  ws.Z = X + dt * ws.k3;
  point(ws.Z);
  flow_field<T>(ws.Z, w, f, p.tangent(), ws, ws.k4, stage(3));
  X_next = X + (dt / T(6)) * (ws.k1 + T(2) * ws.k2 + T(2) * ws.k3 + ws.k4);
  report.rk4_stiffness = rk4_stiffness<T>(ws.k2, ws.k3, ws.k4, dt);
  if (cache) cache->Z = X_next;
  report.degenerate_rows = normalize_rows(X_next, *p.norm);
  return report;
}

}  // namespace

bool kernel_applies(const AttentionKernel& k, const LayerParams& p, bool projection_biases, const MaskRows& rows) {
  const bool attention_dropout = p.dropout && p.dropout->attention > 0.0;
  return rows.contiguous && !p.attention.needs_general_path() && !projection_biases && !p.attention.shape.active() &&
         !attention_dropout && !p.keep_attention && !p.unit_speed() && (k.statistics || !p.attention_statistics);
}

void shape_attention(Eigen::Ref<Matrix> A, const MaskMatrix& mask, const AttentionShape& s) {
  shape_masked<double>(A, mask, s);
}

double logit_bias_slope(const LogitBias& b, std::size_t h, std::size_t H) {
  switch (b.kind) {
    case LogitBiasKind::alibi:
      return std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(H));
    case LogitBiasKind::decay:
      return -std::log(b.gamma);
    case LogitBiasKind::none:
    case LogitBiasKind::file:  // no slope: B is given (add_logit_bias with the layer's weights)
      break;
  }
  return 0.0;
}


void add_logit_bias(Eigen::Ref<Matrix> S, const LogitBias& b, std::size_t h, std::size_t H) {
  add_logit_bias_impl<double>(S, b, h, H);
}
void add_logit_bias(Eigen::Ref<MatrixF> S, const LogitBias& b, std::size_t h, std::size_t H) {
  add_logit_bias_impl<float>(S, b, h, H);
}
void add_logit_bias(Eigen::Ref<Matrix> S, const LogitBias& b, const LayerWeights& w, std::size_t h) {
  if (b.kind == LogitBiasKind::file)
    S += w.logit_bias[h];
  else
    add_logit_bias_impl<double>(S, b, h, w.q.size());
}
void add_logit_bias(Eigen::Ref<MatrixF> S, const LogitBias& b, const LayerWeightsT<float>& w, std::size_t h) {
  if (b.kind == LogitBiasKind::file)
    S += w.logit_bias[h];
  else
    add_logit_bias_impl<float>(S, b, h, w.q.size());
}
void shape_attention(Eigen::Ref<MatrixF> A, const MaskMatrix& mask, const AttentionShape& s) {
  shape_masked<float>(A, mask, s);
}

LayerReport attention_layer(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, const LayerParams& p,
                            LayerWorkspace& ws, Matrix& X_next, LayerCacheT<double>* cache) {
  if (p.rk4()) return rk4_impl<double>(X, w, p, ws, X_next, cache);
  return layer_impl<double>(X, w, p, ws, X_next, cache);
}
LayerReport attention_layer(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, const LayerParams& p,
                            LayerWorkspaceT<float>& ws, MatrixF& X_next, LayerCacheT<float>* cache) {
  if (p.rk4()) return rk4_impl<float>(X, w, p, ws, X_next, cache);
  return layer_impl<float>(X, w, p, ws, X_next, cache);
}

}  // namespace rcsim
