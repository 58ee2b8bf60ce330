#include "kernel/trial/results.hpp"

#include <limits>
#include <stdexcept>

namespace rcsim {

namespace {
std::vector<MeasureInfo> core_info(MeasureAxis axis) {
  std::vector<MeasureInfo> info;
  for (const MeasureDef& d : measure_registry())
    if (!d.optional() && d.axis == axis) info.push_back(d.info);
  return info;
}
}  // namespace

const std::vector<MeasureInfo>& token_measure_info() {
  static const std::vector<MeasureInfo> info = core_info(MeasureAxis::token);
  return info;
}

const std::vector<MeasureInfo>& attention_measure_info() {
  static const std::vector<MeasureInfo> info = core_info(MeasureAxis::attention);
  return info;
}

RunResults allocate_results(const EngineSetup& s) {
  const ModelSpec& c = s.config;
  RunResults r;
  r.trials = c.run.trials;
  r.layers = c.model.layers;
  r.spectrum_size = std::min(c.model.tokens, c.model.dim);
  r.tokens = c.model.tokens;
  r.dim = c.model.dim;
  r.snapshot_layers = static_cast<int>(c.output.token_layers.size());
  r.layer_index = c.output.measure_layers;
  if (r.layer_index.empty())  // a Config built by hand: every layer
    for (int t = 0; t <= r.layers; ++t) r.layer_index.push_back(t);
  r.column_of_layer.assign(static_cast<std::size_t>(r.layers) + 1, -1);
  r.column_of_attention_layer.assign(static_cast<std::size_t>(r.layers), -1);
  for (std::size_t k = 0; k < r.layer_index.size(); ++k) {
    const int t = r.layer_index[k];
    r.column_of_layer[static_cast<std::size_t>(t)] = static_cast<int>(k);
    if (t < r.layers) {
      r.column_of_attention_layer[static_cast<std::size_t>(t)] = static_cast<int>(r.attention_layer_index.size());
      r.attention_layer_index.push_back(t);
    }
  }
  const auto S = static_cast<Eigen::Index>(r.layer_index.size());
  const auto Sa = static_cast<Eigen::Index>(r.attention_layer_index.size());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& name : c.output.measures)
    if (const MeasureDef* d = find_measure(name); !d || !d->optional())
      throw std::logic_error("unknown peer measure " + name);
  for (const MeasureDef& d : measure_registry()) {
    if (!measure_wanted(c, d)) continue;
    const bool token = d.axis == MeasureAxis::token;
    (token ? r.token_info : r.attention_info).push_back(measure_info(d, c));
    (token ? r.token_defs : r.attention_defs).push_back(&d);
  }
  // Each measure's values_per_layer() columns per recorded layer (kernel/measures/measure_registry.hpp).
  for (const MeasureDef* d : r.token_defs) r.token.push_back(Matrix::Constant(r.trials, S * values_per_layer(*d, r.tokens), nan));
  for (const MeasureDef* d : r.attention_defs)
    r.attention.push_back(Matrix::Constant(r.trials, Sa * values_per_layer(*d, r.tokens), nan));
  if (c.output.spectrum) r.spectrum.assign(static_cast<std::size_t>(r.trials), Matrix());
  if (!c.output.token_layers.empty()) r.snapshots.assign(static_cast<std::size_t>(r.trials), {});
  if (c.output.attention) r.attention_matrices.assign(static_cast<std::size_t>(r.trials), {});
  r.underflow_layer.assign(static_cast<std::size_t>(r.trials), -1);
  r.nonfinite_layer.assign(static_cast<std::size_t>(r.trials), -1);
  r.degenerate_total.assign(static_cast<std::size_t>(r.trials), 0);
  r.rk4_stiffness.assign(static_cast<std::size_t>(r.trials), 0.0);
  return r;
}

// The token measures of X(t) at column `col`: the core ones from `m` (one SVD), the optional ones
// of the state from their functions; the gradient measures are filled after the reverse pass.
void record_tokens(const ModelSpec& c, const TokenMeasures& m, const Matrix& X, const Vector& sigma, int trial, int col,
                   RunResults& r) {
  for (std::size_t i = 0; i < r.token_defs.size(); ++i) {
    const MeasureDef& d = *r.token_defs[i];
    if (d.pass == MeasurePass::core)
      r.token[i](trial, col) = m.*d.core_token;
    else if (d.pass == MeasurePass::state)
      r.token[i](trial, col) = d.state(c, X, sigma);
  }
}

// The attention measures of the block t -> t+1 at column `acol` filled during the forward pass:
// the layer's report, and those of the head-averaged attention A(t) and of the product P.
void record_attention(const ModelSpec& c, const LayerReport& rep, const Matrix& A, const Matrix& P, int trial, int acol,
                      RunResults& r) {
  for (std::size_t i = 0; i < r.attention_defs.size(); ++i) {
    const MeasureDef& d = *r.attention_defs[i];
    if (d.pass == MeasurePass::core)
      r.attention[i](trial, acol) = d.core_report(rep);
    else if (d.pass == MeasurePass::attention)
      r.attention[i](trial, acol) = d.of_matrix(c, A);
    else if (d.pass == MeasurePass::attention_product)
      r.attention[i](trial, acol) = d.of_matrix(c, P);
    else if (d.pass == MeasurePass::attention_rows && d.report_values)  // per token: columns acol N + j
      r.attention[i].row(trial).segment(static_cast<Eigen::Index>(acol) * r.tokens, r.tokens) =
          d.report_values(rep).transpose();
    else if (d.pass == MeasurePass::attention_rows)
      r.attention[i](trial, acol) = d.core_report(rep);
  }
}

void record_update(const Matrix& X, const Matrix& X_next, int t, int trial, RunResults& r) {
  if (const int acol = r.column_of_attention_layer[static_cast<std::size_t>(t)]; acol >= 0)
    for (std::size_t i = 0; i < r.attention_defs.size(); ++i)
      if (const MeasureDef& d = *r.attention_defs[i]; d.pass == MeasurePass::update)
        r.attention[i](trial, acol) = d.update(X, X_next);
}

}  // namespace rcsim
