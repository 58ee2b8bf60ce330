#include "kernel/block/block.hpp"
#include "kernel/support/errors.hpp"

#include <cmath>

namespace rcsim {

namespace {

template <class T>
const Normalization& norm_at(const LayerWeightsT<T>& w, const BlockParams& p, int slot) {
  return w.norms_from_file ? w.norms[slot] : *p.layer.norm;
}

// out = X + a Y as attention_layer's residual for post, or Y alone for a = 0; with a skip gain
// s != 1 (residual.skip), out = s X + a Y.
template <class T>
void add_residual(const MatrixT<T>& X, double alpha, double skip, const MatrixT<T>& Y, MatrixT<T>& out) {
  if (alpha == 0.0)
    out = Y;
  else if (skip == 1.0)
    out = X + static_cast<T>(alpha) * Y;
  else
    out = static_cast<T>(skip) * X + static_cast<T>(alpha) * Y;
}

// Y <- s X + a Y for pre and peri (Y the branch output): X + a Y as before when s = 1.
template <class T>
void scale_and_skip(const Eigen::Ref<const MatrixT<T>>& X, double alpha, double skip, MatrixT<T>& Y) {
  if (alpha == 0.0) return;
  Y *= static_cast<T>(alpha);
  if (skip == 1.0)
    Y += X;
  else
    Y.noalias() += static_cast<T>(skip) * X;
}

// The MLP sub-block on X (the attention sub-block's output) into out; returns degenerate rows.
// nGPT's step on the sphere: Y <- X + a (Y - X) (Y the normalised sub-block output).
template <class T>
void ngpt_step(const MatrixT<T>& X, double alpha, MatrixT<T>& Y) {
  Y -= X;
  Y *= static_cast<T>(alpha);
  Y += X;
}

// The MLP's output M (dropped out) into out.
template <class T>
void mlp_branch(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p, BlockWorkspaceT<T>& ws,
                MatrixT<T>& out, BlockCacheT<T>* c) {
  mlp_forward(X, w, p.activation, ws.mlp, out, c ? &c->mlp_cache : nullptr);
  const Dropout* drop = p.layer.dropout;
  if (drop && drop->output > 0.0) apply_dropout<T>(out, drop->output, *drop->rng, c ? &c->mlp_cache.D : nullptr);
}

// The MLP sub-block on X (the attention sub-block's output) into out; returns degenerate rows.
template <class T>
int mlp_sublayer(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p, BlockWorkspaceT<T>& ws,
                 MatrixT<T>& out, BlockCacheT<T>* c) {
  const double alpha = mlp_alpha_of(p), skip = mlp_skip_of(p);
  SubBlockCacheT<T>* sc = c ? &c->mlp : nullptr;
  if (sc) sc->in = X;
  int degenerate = 0;
  if (p.position == NormPosition::ngpt) {  // N2(X + a (N2_out(M(X)) - X))
    mlp_branch<T>(X, w, p, ws, out, c);
    if (sc) sc->Y = out;
    degenerate += normalize_rows(out, norm_at(w, p, kNormMlpOut));
    ngpt_step<T>(X, alpha, out);
    if (sc) sc->Z = out;
    return degenerate + normalize_rows(out, norm_at(w, p, kNormMlp));
  }
  if (p.position == NormPosition::post) {
    mlp_branch<T>(X, w, p, ws, ws.normalised, c);
    add_residual<T>(X, alpha, skip, ws.normalised, out);
    if (sc) sc->Z = out;
    return normalize_rows(out, norm_at(w, p, kNormMlp));
  }
  ws.normalised = X;
  degenerate += normalize_rows(ws.normalised, norm_at(w, p, kNormMlp));
  if (p.layer.norm_scale != 1.0) ws.normalised *= static_cast<T>(p.layer.norm_scale);  // LayerNorm scaling
  if (sc) sc->Xn = ws.normalised;
  // Dropout on M's output, then N2_out (peri), as inside the attention sub-block.
  mlp_branch<T>(ws.normalised, w, p, ws, out, c);
  if (sc) sc->Y = out;
  if (p.position == NormPosition::peri) degenerate += normalize_rows(out, norm_at(w, p, kNormMlpOut));
  scale_and_skip<T>(X, alpha, skip, out);
  return degenerate;
}

// The attention sub-block at pre and peri: X + a A(c N(X)), X + a N_out(A(N(X))).
template <class T>
LayerReport attention_pre_peri(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, const BlockParams& p,
                               BlockWorkspaceT<T>& ws, MatrixT<T>& attn_out, BlockCacheT<T>* c) {
  static const Normalization identity;  // type none: attention_layer adds no normalisation
  ws.normalised = X;
  const int degenerate_in = normalize_rows(ws.normalised, norm_at(w, p, kNormAttn));
  if (p.layer.norm_scale != 1.0) ws.normalised *= static_cast<T>(p.layer.norm_scale);  // LayerNorm scaling
  if (c) c->attention.Xn = ws.normalised;
  LayerParams inner = p.layer;
  inner.alpha = 0.0;  // A(N(X)) alone; the residual is added below
  inner.norm = &identity;
  LayerReport report = attention_layer(ws.normalised, w, inner, ws.layer, attn_out, c ? &c->layer : nullptr);
  report.degenerate_rows += degenerate_in;
  if (c) c->attention.Y = attn_out;
  if (p.position == NormPosition::peri) report.degenerate_rows += normalize_rows(attn_out, norm_at(w, p, kNormAttnOut));
  // X + a * Y, evaluated as attention_layer does for post (IEEE addition commutes); s X + a Y.
  scale_and_skip<T>(X, p.layer.alpha, p.layer.skip, attn_out);
  return report;
}

template <class T>
LayerReport block_impl(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, const BlockParams& p,
                       BlockWorkspaceT<T>& ws, MatrixT<T>& X_next, BlockCacheT<T>* c) {
  const bool mlp = w.mlp_in.size() > 0;
  MatrixT<T>& attn_out = mlp ? ws.middle : X_next;
  LayerCacheT<T>* lc = c ? &c->layer : nullptr;
  LayerReport report;
  if (p.position == NormPosition::ngpt) {  // N(X + a (N_out(A(X)) - X)), nGPT (Loshchilov et al. 2024)
    LayerParams inner = p.layer;
    inner.alpha = 0.0;
    inner.norm = &norm_at(w, p, kNormAttnOut);
    report = attention_layer(X, w, inner, ws.layer, attn_out, lc);
    if (c) c->attention.Y = c->layer.Z;
    ws.normalised = X;  // X as a matrix for the step
    ngpt_step<T>(ws.normalised, p.layer.alpha, attn_out);
    if (c) c->attention.Z = attn_out;
    report.degenerate_rows += normalize_rows(attn_out, norm_at(w, p, kNormAttn));
  } else if (p.position == NormPosition::post) {
    if (w.norms_from_file) {
      LayerParams lp = p.layer;
      lp.norm = &w.norms[kNormAttn];
      report = attention_layer(X, w, lp, ws.layer, attn_out, lc);
    } else {
      report = attention_layer(X, w, p.layer, ws.layer, attn_out, lc);
    }
    if (c) c->attention.Z = c->layer.Z;
  } else {
    report = attention_pre_peri<T>(X, w, p, ws, attn_out, c);
  }
  if (mlp) report.degenerate_rows += mlp_sublayer<T>(ws.middle, w, p, ws, X_next, c);
  return report;
}

}  // namespace

BlockParams block_params(const ModelSpec& c, const MaskMatrix* mask, const Normalization* norm) {
  BlockParams p;
  p.layer = layer_params(c, mask, norm);
  p.position = c.norm.position;
  p.activation = c.mlp.activation;
  p.norm_depth_scaling = c.norm_depth_scaling == NormDepthScaling::inv_sqrt_layer;  // at_layer(p, t)
  if (c.residual_mlp_alpha) {
    p.mlp_alpha = *c.residual_mlp_alpha;
    if (c.residual_depth_scaling == ResidualDepthScaling::inv_sqrt_depth)  // as layer_params' alpha
      p.mlp_alpha = *c.residual_mlp_alpha / std::sqrt(static_cast<double>(c.model.layers));
  }
  p.mlp_skip = c.residual_mlp_skip;
  return p;
}

LayerSettings layer_settings(const ModelSpec& c) {
  LayerSettings table;
  for (const auto& o : c.layer_overrides) {
    LayerSetting s;
    s.from = o.from, s.to = o.to;
    s.params = block_params(*o.spec, nullptr, nullptr);  // every block setting of the range's configuration
    s.norm = Normalization::from_config(*o.spec);
    table.push_back(std::move(s));
  }
  return table;
}

namespace {

// The settings of `settings` with what the run supplies from `run`: the mask and its row ranges,
// the dropout and noise streams, the platform, the attention kept for the measures, the precision
// of the reverse pass, the stop flag. A new block setting needs no line here.
BlockParams with_run_of(const BlockParams& settings, const BlockParams& run) {
  BlockParams q = settings;
  q.layer.mask = run.layer.mask;
  q.layer.rows = run.layer.rows;
  q.layer.dropout = run.layer.dropout;
  q.layer.keep_attention = run.layer.keep_attention;
  q.layer.attention_statistics = run.layer.attention_statistics;
  q.layer.kernel = run.layer.kernel;
  q.layer.threads = run.layer.threads;
  q.layer.general_path = run.layer.general_path;
  q.single = run.single;
  q.per_layer = run.per_layer;
  q.noise = run.noise;
  q.cancel = run.cancel;
  return q;
}

}  // namespace

BlockParams at_layer(const BlockParams& p, int t) {
  if (p.cancel && p.cancel->load(std::memory_order_relaxed)) throw Interrupted();
  BlockParams q = p;
  if (p.per_layer)
    for (const LayerSetting& s : *p.per_layer)
      if (s.from <= t && t <= s.to) {
        q = with_run_of(s.params, p);
        q.layer.norm = &s.norm;
        break;
      }
  q.layer.layer_number = t + 1;
  if (q.norm_depth_scaling) q.layer.norm_scale = 1.0 / std::sqrt(static_cast<double>(t + 1));
  return q;
}

LayerReport transformer_block(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, const BlockParams& p,
                              BlockWorkspace& ws, Matrix& X_next, BlockCacheT<double>* cache) {
  return block_impl<double>(X, w, p, ws, X_next, cache);
}
LayerReport transformer_block(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, const BlockParams& p,
                              BlockWorkspaceT<float>& ws, MatrixF& X_next, BlockCacheT<float>* cache) {
  return block_impl<float>(X, w, p, ws, X_next, cache);
}

}  // namespace rcsim
