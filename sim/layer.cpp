#include "layer.hpp"

#include <algorithm>

namespace rcsim {

LayerReport attention_layer(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, const LayerParams& p,
                            LayerWorkspace& ws, Matrix& X_next) {
  LayerReport report;
  const std::size_t H = w.q.size();
  ws.Y.setZero();
  double entropy = 0.0;
  for (std::size_t h = 0; h < H; ++h) {
    attention_logits(X, w.q[h], w.k[h], p.d_qk, ws.Q, ws.K, ws.S);
    masked_softmax(ws.S, *p.mask);
    const AttentionStats s = attention_stats(ws.S, *p.mask);
    report.attention.min_weight = std::min(report.attention.min_weight, s.min_weight);
    entropy += s.mean_entropy;
    ws.XV.noalias() = X * w.v[h];
    ws.Y.noalias() += ws.S * ws.XV;
  }
  report.attention.mean_entropy = entropy / static_cast<double>(H);
  if (p.alpha != 0.0) {
    X_next = X + p.alpha * ws.Y;
  } else {
    X_next = ws.Y;
  }
  report.degenerate_rows = normalize_rows(X_next, *p.norm);
  return report;
}

}  // namespace rcsim
