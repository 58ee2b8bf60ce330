// The results of a run: per trial, the measures of every recorded layer, the spectra, token
// snapshots and attention matrices asked for, and the trial's diagnostics; how a layer's measures
// are written into them.
#pragma once

#include <string>
#include <vector>

#include "kernel/trial/engine_setup.hpp"
#include "kernel/measures/measure_registry.hpp"
#include "kernel/measures/metrics.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// The core measures of the registry (kernel/measures/measure_registry.hpp), always recorded: the token
// measures, layers 0..L (layer 0 = the input), in the order of TokenMeasures; the attention
// diagnostics, layers 0..L-1 (the layer t -> t+1 is reported at t).
const std::vector<MeasureInfo>& token_measure_info();
const std::vector<MeasureInfo>& attention_measure_info();

struct RunResults {
  int trials = 0, layers = 0, spectrum_size = 0;
  // The shapes of the large per-trial data: N tokens, d features, the number of snapshot layers
  // (output.tokens).
  int tokens = 0, dim = 0, snapshot_layers = 0;
  // The recorded layers (output.schedule: ascending, 0 and L included) and the recorded
  // attention layers (the same without L); column_of_layer[t] is t's column, -1 if not recorded.
  std::vector<int> layer_index, attention_layer_index;
  std::vector<int> column_of_layer, column_of_attention_layer;
  // token[m] is trials x layer_index.size(), for the m-th entry of token_info (and token_defs):
  // the registry's token measures that are recorded (the core ones and those of output.measures),
  // in registry order (kernel/measures/measure_registry.hpp).
  std::vector<Matrix> token;
  // attention[m] is trials x attention_layer_index.size(), for the m-th entry of attention_info
  // (and attention_defs): the registry's recorded attention measures, in registry order.
  std::vector<Matrix> attention;
  std::vector<MeasureInfo> token_info, attention_info;
  std::vector<const MeasureDef*> token_defs, attention_defs;
  std::vector<Matrix> spectrum;               // per trial: layer_index.size() x min(N, d), if requested
  std::vector<std::vector<Matrix>> snapshots; // per trial, per requested layer: N x d
  // per trial, per recorded attention layer: the head-averaged attention matrix N x N
  // (output.attention)
  std::vector<std::vector<Matrix>> attention_matrices;
  std::vector<int> underflow_layer;  // first layer where mu < DBL_MIN (-1: never)
  std::vector<int> nonfinite_layer;  // first layer with a non-finite entry (-1: never); the trial
                                     // stops there and later measures are NaN
  std::vector<int> degenerate_total; // degenerate rows summed over layers
  std::vector<double> rk4_stiffness;  // the largest dt L over the trial's RK4 steps (LayerReport; 0 without)
};

RunResults allocate_results(const EngineSetup& s);

// The token measures of X(t) at column `col` of row `trial`: the core ones from `m` (one SVD), the
// optional ones of the state from their functions; the derivative measures are filled after the
// reverse pass (kernel/trial/derivative_measures.hpp).
void record_tokens(const ModelSpec& c, const TokenMeasures& m, const Matrix& X, const Vector& sigma, int trial, int col,
                   RunResults& r);
// The attention measures of the block t -> t+1 at column `acol` filled during the forward pass:
// the layer's report, and those of the head-averaged attention A(t) and of the product P.
void record_attention(const ModelSpec& c, const LayerReport& rep, const Matrix& A, const Matrix& P, int trial, int acol,
                      RunResults& r);
// The update measures of the block t -> t+1 (update_size, ...): of its input X and output X_next.
void record_update(const Matrix& X, const Matrix& X_next, int t, int trial, RunResults& r);

}  // namespace rcsim
