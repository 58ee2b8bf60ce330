#include "model/block.hpp"

namespace rcsim {

LayerReport transformer_block(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, const BlockParams& p,
                              BlockWorkspace& ws, Matrix& X_next) {
  if (p.position == NormPosition::post) return attention_layer(X, w, p.layer, ws.layer, X_next);
  static const Normalization identity;  // type none: attention_layer adds no normalisation
  const Normalization& norm = *p.layer.norm;
  ws.normalised = X;
  const int degenerate_in = normalize_rows(ws.normalised, norm);
  LayerParams inner = p.layer;
  inner.alpha = 0.0;  // A(N(X)) alone; the residual is added below
  inner.norm = &identity;
  LayerReport report = attention_layer(ws.normalised, w, inner, ws.layer, X_next);
  report.degenerate_rows += degenerate_in;
  if (p.position == NormPosition::peri) report.degenerate_rows += normalize_rows(X_next, norm);
  if (p.layer.alpha != 0.0) {
    // X + a * Y, evaluated as attention_layer does for post (IEEE addition commutes).
    X_next *= p.layer.alpha;
    X_next += X;
  }
  return report;
}

}  // namespace rcsim
