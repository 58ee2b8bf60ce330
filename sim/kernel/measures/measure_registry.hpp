// The measure registry: every per-layer measure rcsim records, declared once (name, long name,
// units, token or attention measure, what computes it, its extra /metrics attributes).
//
// The trial loop (kernel/trial/simulation.cpp) allocates a result column per recorded measure and fills
// it from the entry; output.measures is validated against the optional names; io writes /metrics
// and /summary from the entries; `rcsim --help-keys` lists optional_measure_names_text().
// Adding a measure: one entry in measure_registry() (measure_registry.cpp) plus its function
// (docs/dev/kernel.md, "Adding a measure").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernel/model/model_spec.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

struct LayerReport;    // kernel/block/layer.hpp
struct TokenMeasures;  // kernel/measures/metrics.hpp
template <class T>
struct BlockGradsT;  // kernel/block/backward.hpp
using BlockGrads = BlockGradsT<double>;

// A per-layer measure as stored in /metrics: name, long_name, units and description attributes.
// long_name is a short axis label (at most 40 characters: plots and xarray use it as one);
// description is the sentence that defines the measure.
struct MeasureInfo {
  const char* name;
  std::string long_name;  // as declared; stored as measure_info(def, c) says
  const char* units;
  std::string description;
};

// token: a measure of X(t), layers 0..L (layer 0 = the input). attention: a measure of the block
// t -> t+1, layers 0..L-1 (reported at t).
enum class MeasureAxis { token, attention };

// How many values a measure has at each recorded layer: one (a dataset [trial, layer]), or one per
// token i = 0..N-1 (a dataset [trial, layer, token], e.g. last_token_sensitivity). Every writer and
// reader of the results (allocation, /metrics, /summary, checkpoints, memory estimates) takes the
// width from values_per_layer(), nowhere else.
enum class MeasureShape { scalar, per_token };

// What fills a measure's column.
enum class MeasurePass {
  core,               // always recorded: a TokenMeasures member (core_token) or the layer's report (core_report)
  state,              // optional token measure of X(t) and its singular values: state
  attention,          // optional, of the head-averaged attention matrix A(t): of_matrix
  attention_product,  // optional, of the product A(t) ... A(0): of_matrix
  update,             // optional, of the block's input and output X(t), X(t+1): update
  gradients,          // optional, filled by the reverse pass after the trial (kernel/block/gradients.hpp)
  attention_rows,     // optional, of the attention statistics the layer computes in its own pass on every
                      // platform (kernel/block/attention_statistics.hpp): report, or report_values (per key)
};

// The pass of the derivative measures that fills a token-axis gradient measure
// (MeasurePass::gradients; kernel/trial/derivative_measures.cpp). The measures of one pass share its
// reverse or forward passes; record_gradients runs each pass some measure of `c` asks for.
enum class DerivativePass {
  none,              // not a token-axis derivative measure (the block gradients: block_gradient)
  readout_gradient,  // dL/dX(t) of the readout loss L = 1^T X(L) R: grad_x_norm
  jacobian_fro,      // the rows of d(X(L) R)/dX(t) (N reverse passes or K probes): jacobian_log_fro2
  jacobian_spec,     // the same rows kept, their Gram matrix's largest eigenvalue: jacobian_log_spec2
  last_token,        // d x_N(L)/dX(t) (d reverse passes): last_token_sensitivity
  full_fro,          // the full Nd x Nd Jacobian by reverse passes: jacobian_log_fro2_full
  full_spectral,     // the full Jacobian by power iteration (forward and reverse): jacobian_log_spec2_full
};

// An extra attribute of the measure's /metrics dataset (a double, or an integer if `integer`).
struct MeasureAttribute {
  const char* name;
  double value = 0.0;
  std::int64_t integer_value = 0;
  bool integer = false;
};

using StateMeasureFn = double (*)(const ModelSpec& c, const Matrix& X, const Vector& sigma);
using ReportMeasureFn = double (*)(const LayerReport& report);
using ReportValuesFn = const Vector& (*)(const LayerReport& report);  // one value per token
using MatrixMeasureFn = double (*)(const ModelSpec& c, const Matrix& A);
using UpdateMeasureFn = double (*)(const Matrix& X, const Matrix& X_next);
// What a measure's extra attributes read of a run (the trial's EngineSetup supplies it).
struct MeasureContext {
  const ModelSpec& config;
  int max_rank = 0, max_rank_input = 0;
};
using MeasureAttributesFn = std::vector<MeasureAttribute> (*)(const MeasureContext& s);
using BlockGradientFn = double (*)(const BlockGrads& g);

struct MeasureDef {
  MeasureInfo info;
  MeasureAxis axis;
  MeasurePass pass;
  MeasureShape shape = MeasureShape::scalar;
  // Exactly the one member that belongs to `pass` is set (for gradients: block_gradient, or
  // `derivative` for the token-axis gradient measures):
  double TokenMeasures::*core_token = nullptr;  // core token measures
  ReportMeasureFn core_report = nullptr;        // core attention measures, and attention_rows (scalar)
  ReportValuesFn report_values = nullptr;       // attention_rows (per_token)
  StateMeasureFn state = nullptr;
  MatrixMeasureFn of_matrix = nullptr;  // attention, attention_product
  UpdateMeasureFn update = nullptr;
  BlockGradientFn block_gradient = nullptr;  // gradients of block t's parameters (attention axis)
  DerivativePass derivative = DerivativePass::none;  // the token-axis gradient measures' pass
  MeasureAttributesFn attributes = nullptr;  // optional: extra /metrics attributes
  bool optional() const { return pass != MeasurePass::core; }
};

// Every measure: the core token measures (in the order of TokenMeasures), the core attention
// measures, then the optional measures of output.measures in their canonical order.
const std::vector<MeasureDef>& measure_registry();
// The entry called `name`; nullptr if there is none.
const MeasureDef* find_measure(const std::string& name);
// The names of the optional measures (what output.measures allows), in registry order.
const std::vector<std::string>& optional_measure_names();
// Joined with " | " by optional_measure_names_text() (declared in kernel/model/model_spec.hpp, so that
// config/config.cpp's key table can use it).
// `def`'s long_name and description as a run of `c` stores them: the gradient measures' loss follows
// metrics.readout (all_tokens: L = 1^T X(L) R and the N rows of X(L) R; last_token: L = x_N(L) R,
// its one row, one reverse pass).
MeasureInfo measure_info(const MeasureDef& def, const ModelSpec& c);
// True if `c` asks for `def` (core measures: always).
bool measure_wanted(const ModelSpec& c, const MeasureDef& def);
// True if `c` asks for a measure filled by `pass`.
bool wants_pass(const ModelSpec& c, MeasurePass pass);
// The values of `def` per recorded layer in a run of `tokens` tokens: 1 (scalar) or N (per_token).
// A measure's results are a trials x (recorded layers x values_per_layer) matrix, column
// k * values_per_layer + i for recorded layer k and value i: in C order, the [trial, layer, token]
// array the file stores.
int values_per_layer(const MeasureDef& def, int tokens);
// The name of the extra axis of a measure of that shape ("token"), or nullptr for a scalar one.
const char* value_axis_name(const MeasureDef& def);
// The extra /metrics attributes of `def` in a run of `s` (empty if it has none).
std::vector<MeasureAttribute> measure_attributes(const MeasureDef& def, const MeasureContext& s);

}  // namespace rcsim
