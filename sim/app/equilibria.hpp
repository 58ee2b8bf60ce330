// Equilibria of an attention stack with fixed weights (docs/science/model-spec.md 5.5): many starting points
// iterated X(t+1) = layer(X(t)) until the fixed-point residual ||X(t+1) - X(t)||_F falls below a
// tolerance; end states classified (rank, token clusters, stability) and grouped into distinct
// equilibria with their basin fractions. Layout of the output file in docs/science/equilibria.md.
#pragma once

#include "io/input_digest.hpp"
#include "io/output_file.hpp"

#include <atomic>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

struct EquilibriumOptions {
  double tol = 1e-12;          // converged when ||X(t+1) - X(t)||_F < tol (max layers: model.layers)
  double perturbation = 1e-6;  // stability probe: X + perturbation ||X||_F G / ||G||_F, G Gaussian
  int probes = 4;              // probes per equilibrium
  double match_tol = 1e-6;     // same equilibrium / same token: distance < match_tol * scale
  double rank_rtol = 1e-8;     // rank: #{sigma_i > rank_rtol sigma_max}
};
// Throws UsageError naming the option unless every value is in range.
void validate(const EquilibriumOptions& o);

// How the tokens of a state relate: all identical, all +-one vector (some antipodal), or not.
enum class TokenClass { identical = 0, antipodal = 1, distinct = 2 };
std::string to_string(TokenClass c);

struct StateClass {
  int rank = 0;
  TokenClass tokens = TokenClass::distinct;
  int clusters = 0;  // groups of identical tokens
};
StateClass classify_state(const Eigen::Ref<const Matrix>& X, double match_tol, double rank_rtol);

// The map X -> layer(X) under one set of fixed weights.
class FixedLayerMap {
 public:
  // Throws UsageError unless weights.q, .k, .v (and .o with model.value_dim) are fixed, zero,
  // identity or file, and the arrays of weights.file have no layer axis. Reads weights.file and
  // init.file (load_inputs) before the weights are drawn.
  explicit FixedLayerMap(const Config& c);
  FixedLayerMap(const FixedLayerMap&) = delete;  // params_ points into this object
  FixedLayerMap& operator=(const FixedLayerMap&) = delete;
  void apply(const Eigen::Ref<const Matrix>& X, Matrix& out);
  // Iterate from X (in place) until the residual < tol or max_layers; returns the last residual
  // and sets `layers` to the number of layers applied.
  double iterate(Matrix& X, double tol, int max_layers, int& layers);
  const Config& config() const { return c_; }
  const InputArrays& inputs() const { return files_; }  // weights.file and init.file, as read

 private:
  Config c_;
  MaskMatrix mask_;
  Normalization norm_;
  InputArrays files_;
  LayerWeights w_;
  LayerParams params_;
  LayerWorkspace ws_;
  Matrix next_;
};

struct EndState {
  Matrix start, end;
  double residual = 0;  // ||layer(X) - X||_F at the end state
  int layers = 0;
  bool converged = false;
  StateClass cls;
  int equilibrium = -1;  // index into EquilibriumSearch::equilibria (-1: not converged)
};

struct Equilibrium {
  Matrix X;
  StateClass cls;
  double residual = 0;        // ||layer(X) - X||_F
  bool stable = false;        // every probe ended within sqrt(perturbation) ||X||_F of X (neutral
                              // directions drift O(perturbation), unstable ones O(1))
  double probe_distance = 0;  // largest ||X_probe_end - X||_F / ||X||_F over the probes
  int count = 0;
  double basin_fraction = 0;  // count / number of starts
};

struct EquilibriumSearch {
  std::vector<EndState> starts;
  std::vector<Equilibrium> equilibria;
  int unconverged = 0;
};

// Run run.trials starting points (X(0) from init.*, trial k's stream) for at most model.layers
// layers each.
EquilibriumSearch find_equilibria(const Config& c, const EquilibriumOptions& o,
                                  const std::atomic<bool>* cancel = nullptr);

// Write the search into `file`'s temporary and publish it (rename it onto the target).
void write_equilibria_file(OutputFile& file, const Config& c, const EquilibriumOptions& o,
                           const EquilibriumSearch& s, const std::string& command_line,
                           const InputDigests& inputs);

// The printed summary (one line per equilibrium).
// The printed table of distinct equilibria (the first kTableRows rows, then "... N more rows",
// unless `verbose`), followed by equilibria_summary().
constexpr std::size_t kTableRows = 20;
std::string equilibria_table(const EquilibriumSearch& s, bool verbose = false);
// Distinct equilibria and end states by rank, token class and stability, with their basin
// fractions (the share of the starts that ended there), and the unconverged starts.
std::string equilibria_summary(const EquilibriumSearch& s);

}  // namespace rcsim
