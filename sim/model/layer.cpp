#include "model/layer.hpp"

#include <algorithm>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace rcsim {

namespace {
bool keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
  return true;
}
}  // namespace

LayerWorkspace::LayerWorkspace(int n, int d, int dk) : XV(n, d), Y(n, d) {
  static const bool tuned = keep_freed_memory();
  (void)tuned;
  (void)dk;
}

LayerReport attention_layer(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, const LayerParams& p,
                            LayerWorkspace& ws, Matrix& X_next) {
  LayerReport report;
  const std::size_t H = w.q.size();
  if (ws.analysed != p.mask) {
    ws.rows = analyse_rows(*p.mask);
    ws.analysed = p.mask;
  }
  const bool fast = ws.rows.contiguous;
  const bool lower = ws.rows.lower_triangular;
  // One head without residual: the product goes straight into X_next.
  const bool direct = H == 1 && p.alpha == 0.0;
  Matrix& Y = direct ? X_next : ws.Y;
  Y.resize(X.rows(), X.cols());
  if (!direct) Y.setZero();
  double entropy = 0.0;
  for (std::size_t h = 0; h < H; ++h) {
    AttentionStats s;
    if (fast) {
      attention_logits_fast(X, w.q[h], w.k[h], p.d_qk, lower, ws.logits, ws.S_rows);
      s = softmax_rows(ws.S_rows, ws.rows, ws.buffer);
    } else {
      attention_logits(X, w.q[h], w.k[h], p.d_qk, ws.Q, ws.K, ws.S);
      masked_softmax(ws.S, *p.mask);
      s = attention_stats(ws.S, *p.mask);
    }
    report.attention.min_weight = std::min(report.attention.min_weight, s.min_weight);
    entropy += s.mean_entropy;
    if (p.dropout && p.dropout->attention > 0.0) {
      if (fast)
        apply_dropout(ws.S_rows, p.dropout->attention, *p.dropout->rng);
      else
        apply_dropout(ws.S, p.dropout->attention, *p.dropout->rng);
    }
    ws.XV.noalias() = X * w.v[h];
    if (!fast) {
      if (direct)
        Y.noalias() = ws.S * ws.XV;
      else
        Y.noalias() += ws.S * ws.XV;
    } else if (lower) {
      if (direct)
        Y.noalias() = ws.S_rows.triangularView<Eigen::Lower>() * ws.XV;
      else
        Y.noalias() += ws.S_rows.triangularView<Eigen::Lower>() * ws.XV;
    } else {
      if (direct)
        Y.noalias() = ws.S_rows * ws.XV;
      else
        Y.noalias() += ws.S_rows * ws.XV;
    }
  }
  report.attention.mean_entropy = entropy / static_cast<double>(H);
  if (p.dropout && p.dropout->output > 0.0) apply_dropout(Y, p.dropout->output, *p.dropout->rng);
  if (!direct) {
    if (p.alpha != 0.0) {
      X_next = X + p.alpha * ws.Y;
    } else {
      X_next = ws.Y;
    }
  }
  report.degenerate_rows = normalize_rows(X_next, *p.norm);
  return report;
}

}  // namespace rcsim
