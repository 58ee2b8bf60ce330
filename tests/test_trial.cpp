// The steppable trial (kernel/trial/trial.hpp) and the reverse pass's tape (kernel/trial/trial_tape.hpp): a
// trial resumed from a saved state continues bitwise as the trial itself (every stream it draws
// from is in the state), a segment replayed from a checkpoint is bitwise the block inputs, weights
// and streams that the stored tape keeps, and the run's token snapshots are the trial's tokens.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "io/inputs.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/trial/trial.hpp"
#include "kernel/trial/trial_tape.hpp"

namespace rcsim {
namespace {

using Values = std::map<std::string, std::string>;

// Settings that draw from every stream a trial has: the weights (fresh per layer), dropout, the
// noise step, float32 rounding; and those of the particle flow (RK4, tangent projection).
const std::vector<Values>& settings() {
  static const std::vector<Values> all = {
      {{"model.tokens", "7"}, {"model.dim", "4"}, {"model.layers", "6"}, {"norm.type", "sphere"},
       {"residual.alpha", "0.5"}, {"dynamics.noise", "0.3"}, {"dropout.attention", "0.2"},
       {"dropout.output", "0.1"}},
      {{"model.tokens", "6"}, {"model.dim", "5"}, {"model.layers", "5"}, {"norm.type", "layernorm"},
       {"norm.position", "pre"}, {"residual.alpha", "1"}, {"mlp.width", "8"}, {"run.precision", "float32"},
       {"dropout.attention", "0.1"}},
      {{"model.tokens", "8"}, {"model.dim", "3"}, {"model.layers", "6"}, {"init.type", "sphere"},
       {"norm.type", "sphere"}, {"residual.alpha", "0.2"}, {"residual.project", "tangent"},
       {"dynamics.integrator", "rk4"}, {"dynamics.noise", "0.1"}, {"mask.type", "causal"}},
  };
  return all;
}

std::vector<Matrix> step_to_end(Trial& trial, int layers) {
  std::vector<Matrix> X{trial.tokens()};
  while (trial.layer() < layers) {
    trial.step();
    X.push_back(trial.tokens());
  }
  return X;
}

bool bitwise_equal(const Matrix& a, const Matrix& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && (a.array() == b.array()).all();
}

}  // namespace

TEST_CASE("trial: resumed from a saved state it continues bitwise as itself", "[trial]") {
  for (const Values& v : settings()) {
    const EngineSetup s = prepare(make_config(v));
    const int L = s.config.model.layers;
    for (const int k : {0, 2, L - 1}) {
      Trial trial(s, 3);
      for (int t = 0; t < k; ++t) trial.step();
      const TrialState saved = trial.save();
      const std::vector<Matrix> first = step_to_end(trial, L);
      Trial other(s, 5);  // another trial's object, resumed: nothing of trial 5 may remain
      other.step();
      other.resume(saved);
      REQUIRE(other.layer() == k);
      const std::vector<Matrix> again = step_to_end(other, L);
      REQUIRE(again.size() == first.size());
      for (std::size_t t = 0; t < first.size(); ++t) CHECK(bitwise_equal(again[t], first[t]));
      // A state that left out the noise or dropout stream (a fresh one) must not reproduce it.
      if (saved.noise || saved.dropout) {
        TrialState fresh = saved;
        if (fresh.noise) fresh.noise = RandomStream(s.config.run.seed, 99, kDynamicsNoiseStream);
        if (fresh.dropout) fresh.dropout = RandomStream(s.config.run.seed, 99, kDropoutStream);
        other.resume(fresh);
        CHECK_FALSE(bitwise_equal(step_to_end(other, L).back(), first.back()));
      }
    }
  }
}

TEST_CASE("trial: the run's token snapshots are the stepped trial's tokens", "[trial]") {
  for (Values v : settings()) {
    v["output.tokens"] = "all";
    v["run.trials"] = "3";
    const EngineSetup s = prepare(make_config(v));
    const RunResults r = run_simulation(s, 2);
    for (int i = 0; i < 3; ++i) {
      Trial trial(s, i);
      const std::vector<Matrix> X = step_to_end(trial, s.config.model.layers);
      REQUIRE(r.snapshots[static_cast<std::size_t>(i)].size() == X.size());
      for (std::size_t t = 0; t < X.size(); ++t) CHECK(bitwise_equal(r.snapshots[static_cast<std::size_t>(i)][t], X[t]));
    }
  }
}

TEST_CASE("trial tape: a segment replayed from its checkpoint is the stored tape's", "[trial]") {
  for (Values v : settings()) {
    v["output.measures"] = "grad_x_norm";
    const EngineSetup s = prepare(make_config(v));
    const int L = s.config.model.layers;
    TrialTape stored(s, 1, L), segmented(s, 1, 2);
    Trial a(s, 1), b(s, 1);
    for (int t = 0; t < L; ++t) {
      stored.step(a);
      segmented.step(b);
    }
    REQUIRE(bitwise_equal(a.tokens(), b.tokens()));
    for (int first = 0; first < L; first += 2) {
      const int end = std::min(first + 2, L);
      BlockTape want, got;
      stored.replay(first, end, want);
      segmented.replay(first, end, got);
      REQUIRE(got.inputs.size() == static_cast<std::size_t>(end - first));
      REQUIRE(got.weights.size() == want.weights.size());
      REQUIRE(got.dropout.size() == want.dropout.size());
      REQUIRE(got.noise.size() == want.noise.size());
      for (std::size_t k = 0; k < got.inputs.size(); ++k) {
        CHECK(bitwise_equal(got.inputs[k], want.inputs[k]));
        CHECK(bitwise_equal(got.weights[k].v[0], want.weights[k].v[0]));
      }
      for (std::size_t k = 0; k < got.noise.size(); ++k) {  // the same next draws
        RandomStream x = got.noise[k], y = want.noise[k];
        CHECK(x.normal() == y.normal());
      }
      for (std::size_t k = 0; k < got.dropout.size(); ++k) {
        RandomStream x = got.dropout[k], y = want.dropout[k];
        CHECK(x.uniform() == y.uniform());
      }
    }
  }
}

}  // namespace rcsim
