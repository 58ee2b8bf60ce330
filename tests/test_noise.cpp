// Noise in the particle dynamics (kernel/ops/noise.hpp, docs/science/particles.md): init.noise on X(0)
// and dynamics.noise after each layer, each from its own random stream.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>

#include "sim_support.hpp"
#include "app/run.hpp"
#include "config/config.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/trial/simulation.hpp"

using namespace rcsim;
using rcsim::test::simulate;

namespace {

using Keys = std::map<std::string, std::string>;


double mean(const Matrix& m) { return m.mean(); }
double variance(const Matrix& m) { return (m.array() - m.mean()).square().sum() / static_cast<double>(m.size() - 1); }

}  // namespace

TEST_CASE("dynamics.noise adds sigma sqrt(dt) N(0, 1) after the layer and changes nothing else", "[noise][particles]") {
  // One layer without normalisation: the noisy X(1) minus the same run's X(1) without noise is
  // exactly sigma sqrt(dt) G (the weights and X(0) come from streams the noise does not touch).
  Keys keys = {{"model.tokens", "64"}, {"model.dim", "16"},       {"model.layers", "1"},
               {"run.trials", "4"},    {"residual.alpha", "0.25"}, {"output.tokens", "0,1"}};
  const RunResults clean = simulate(keys);
  keys["dynamics.noise"] = "0.1";
  const RunResults noisy = simulate(keys);
  const double scale = 0.1 * std::sqrt(0.25);
  Matrix all(64 * 4, 16);
  for (int t = 0; t < 4; ++t) {
    CHECK(noisy.snapshots[t][0] == clean.snapshots[t][0]);  // X(0) untouched
    all.middleRows(64 * t, 64) = (noisy.snapshots[t][1] - clean.snapshots[t][1]) / scale;
  }
  // 4096 draws: the sample mean has sd 0.016 and the sample variance sd 0.022.
  CHECK(std::abs(mean(all)) < 0.08);
  CHECK(std::abs(variance(all) - 1.0) < 0.1);
  // Trials draw different noise.
  CHECK((all.middleRows(0, 64) - all.middleRows(64, 64)).norm() > 1.0);
}

TEST_CASE("dynamics.noise on the sphere keeps the tokens on it, and does not depend on threads", "[noise][particles]") {
  Keys keys = {{"model.tokens", "16"},    {"model.dim", "3"},       {"model.layers", "20"},
               {"run.trials", "6"},       {"residual.alpha", "0.1"}, {"norm.type", "sphere"},
               {"init.type", "sphere"},   {"dynamics.noise", "0.05"}, {"output.tokens", "all"}};
  const RunResults one = simulate(keys, 1), two = simulate(keys, 2);
  for (int t = 0; t < 6; ++t) {
    for (std::size_t k = 0; k < one.snapshots[t].size(); ++k) {
      CHECK(one.snapshots[t][k] == two.snapshots[t][k]);
      CHECK((one.snapshots[t][k].rowwise().norm().array() - 1.0).abs().maxCoeff() < 1e-14);
    }
  }
  keys["dynamics.noise"] = "0";
  const RunResults clean = simulate(keys, 1);
  CHECK((clean.snapshots[0].back() - one.snapshots[0].back()).norm() > 1e-3);
}

TEST_CASE("init.noise perturbs the circle by about sigma in angle and keeps it on the circle", "[noise][particles]") {
  const double sigma = 0.01, pi = 3.14159265358979323846;
  const Keys keys = {{"model.tokens", "200"}, {"model.dim", "2"},       {"model.layers", "1"},
                     {"run.trials", "2"},     {"init.type", "circle"},  {"init.noise", "0.01"},
                     {"output.tokens", "0"}};
  const RunResults r = simulate(keys);
  double sum2 = 0;
  for (int j = 0; j < 200; ++j) {
    const Matrix& X = r.snapshots[0][0];
    CHECK(std::abs(X.row(j).norm() - 1.0) < 1e-15);
    double err = std::atan2(X(j, 1), X(j, 0)) - 2.0 * pi * j / 200.0;
    err = std::remainder(err, 2.0 * pi);
    sum2 += err * err;
  }
  // The angle moves by the tangential component of sigma G: std sigma (200 draws: within 20%).
  const double angle_std = std::sqrt(sum2 / 200.0);
  CHECK(angle_std > 0.8 * sigma);
  CHECK(angle_std < 1.2 * sigma);
  CHECK(r.snapshots[0][0] != r.snapshots[1][0]);  // each trial its own noise
}

TEST_CASE("noise keys: ranges, and the settings they are defined for", "[noise][config]") {
  CHECK_THROWS_AS(make_config({{"dynamics.noise", "-0.1"}}), UsageError);
  CHECK_THROWS_AS(make_config({{"init.noise", "-1"}}), UsageError);
  CHECK_THROWS_WITH(make_config({{"dynamics.noise", "0.1"}, {"norm.type", "layernorm"}}),
                    Catch::Contains("dynamics.noise") && Catch::Contains("sphere"));
  CHECK_THROWS_WITH(make_config({{"dynamics.noise", "0.1"}, {"norm.type", "sphere"}, {"norm.position", "pre"}}),
                    Catch::Contains("dynamics.noise"));
  // The reverse pass covers the noise step (tests/test_backward_dynamics.cpp, [particles]): the gradient measures run.
  CHECK(run_simulation(prepare(make_config({{"dynamics.noise", "0.1"}, {"output.measures", "grad_x_norm"}}), nullptr, {}),
                       1).token[0].allFinite());
  // At 0 the keys are not part of the stored configuration (runs without them stay the same runs).
  const std::string ini = make_config({{"dynamics.noise", "0"}, {"init.noise", "0"}}).to_ini();
  CHECK(ini.find("noise") == std::string::npos);
  CHECK(make_config({{"dynamics.noise", "0.5"}}).to_ini().find("noise = 0.5") != std::string::npos);
}
