// The predictions of docs/science/model-spec.md section 5 that the core engine must reproduce (items 1, 3, 5).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <filesystem>

#include "sim_support.hpp"
#include "io/inputs.hpp"
#include "config/config.hpp"
#include "io/hdf5_file.hpp"
#include "kernel/model/random.hpp"
#include "kernel/trial/simulation.hpp"

using namespace rcsim;
using rcsim::test::simulate;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

namespace {

// Least-squares slope of y against x.
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

// Median over trials of the per-layer decay rate of log mu, fitted on the layers where
// mu_rel lies between 0.5 and 1e-12 (past the first transient, before the round-off floor).
struct Decay {
  double rate = 0.0;      // median slope of ln mu per layer
  double worst_r2 = 1.0;  // smallest coefficient of determination over trials
};

Decay fitted_decay(const RunResults& r) {
  std::vector<double> rates;
  Decay out;
  for (int trial = 0; trial < r.trials; ++trial) {
    std::vector<double> x, y;
    for (int t = 0; t <= r.layers; ++t) {
      const double rel = r.token[1](trial, t);
      if (rel < 0.5 && rel > 1e-12) {
        x.push_back(t);
        y.push_back(std::log(r.token[0](trial, t)));
      }
    }
    if (x.size() < 2) continue;
    const double b = slope(x, y);
    double my = 0;
    for (double v : y) my += v / static_cast<double>(y.size());
    const double a = my - b * (std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size()));
    double ss_res = 0, ss_tot = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      ss_res += std::pow(y[i] - (a + b * x[i]), 2);
      ss_tot += std::pow(y[i] - my, 2);
    }
    if (x.size() >= 5) out.worst_r2 = std::min(out.worst_r2, 1.0 - ss_res / ss_tot);
    rates.push_back(b);
  }
  REQUIRE(rates.size() >= 4);
  std::sort(rates.begin(), rates.end());
  out.rate = rates[rates.size() / 2];
  return out;
}

}  // namespace

TEST_CASE("prediction 1: pure attention collapses exponentially, local masks slow it", "[theory]") {
  std::map<std::string, std::string> base = {
      {"model.tokens", "16"}, {"model.dim", "8"},        {"model.layers", "300"}, {"weights.v", "orthogonal"},
      {"weights.q_std", "1"}, {"weights.k_std", "1"},    {"run.trials", "8"},     {"model.d_qk", "8"},
      {"mask.window", "2"}};
  auto with = [&](const std::string& mask) {
    auto v = base;
    v["mask.type"] = mask;
    return v;
  };
  const Decay complete = fitted_decay(simulate(with("complete")));
  const Decay causal = fitted_decay(simulate(with("causal")));
  const Decay window = fitted_decay(simulate(with("sliding_window")));
  INFO("rates per layer of ln mu: complete " << complete.rate << ", causal " << causal.rate << ", window "
                                              << window.rate);
  // Exponential: ln mu falls on a straight line (R^2 close to 1) with a negative slope.
  CHECK(complete.rate < 0.0);
  CHECK(causal.rate < 0.0);
  CHECK(window.rate < 0.0);
  CHECK(causal.worst_r2 > 0.95);
  CHECK(window.worst_r2 > 0.95);
  // The complete mask collapses fastest, the sliding window (w = 2, radius 4) slowest.
  CHECK(complete.rate < causal.rate);
  CHECK(causal.rate < window.rate);
}

TEST_CASE("prediction 1: mu sits under the envelope C (1 - eps^r)^(t/r) with orthogonal W_V", "[theory]") {
  // Complete mask (r = 1), shared orthogonal W_V; C = sqrt(N) mu(0) covers the Frobenius norm.
  const auto cfg = make_config({{"model.tokens", "6"}, {"model.dim", "3"}, {"model.layers", "40"},
                                {"weights.v", "orthogonal"}, {"run.trials", "4"}, {"model.d_qk", "3"}});
  const EngineSetup s = prepare(cfg);
  const RunResults r = run_simulation(s, 1);
  for (int trial = 0; trial < r.trials; ++trial) {
    const double eps = r.attention[0].row(trial).minCoeff();
    REQUIRE(eps > 0.0);
    const double C = std::sqrt(6.0) * r.token[0](trial, 0);
    for (int t = 0; t <= r.layers; ++t) {
      const double bound = C * std::pow(1.0 - eps, t);
      if (bound < 1e-13 * r.token[2](trial, 0)) break;  // below the round-off floor
      CHECK(r.token[0](trial, t) <= bound);
    }
  }
}

TEST_CASE("prediction 3: causal token 0 under pure attention is x_0(0) W_V(0) ... W_V(t-1)", "[theory]") {
  const int N = 5, d = 3, L = 12;
  const std::string file = (std::filesystem::temp_directory_path() / "rcsim_test_causal_weights.h5").string();
  std::vector<Matrix> wv;
  {
    RandomStream rng(99, 0);
    std::vector<double> v;
    for (int t = 0; t < L; ++t) {
      RowMajorMatrix w(d, d);
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) w(i, j) = rng.normal() * 0.7;
      wv.push_back(w);
      v.insert(v.end(), w.data(), w.data() + d * d);
    }
    const h5::File f = h5::File::create(file);
    f.write("W_V", {static_cast<hsize_t>(L), static_cast<hsize_t>(d), static_cast<hsize_t>(d)}, v.data());
  }
  for (const std::string norm : {"none", "sphere"}) {
    const auto cfg = make_config({{"model.tokens", std::to_string(N)}, {"model.dim", std::to_string(d)},
                                  {"model.layers", std::to_string(L)}, {"mask.type", "causal"},
                                  {"weights.v", "file"}, {"weights.file", file}, {"norm.type", norm},
                                  {"run.trials", "2"}, {"output.tokens", "all"}});
    const RunResults r = run_simulation(prepare(cfg), 1);
    for (int trial = 0; trial < 2; ++trial) {
      RowVector x = r.snapshots[static_cast<std::size_t>(trial)][0].row(0);
      if (norm == "sphere") x.normalize();  // the input is not normalised; layer 1 onwards are
      for (int t = 1; t <= L; ++t) {
        x = x * wv[static_cast<std::size_t>(t - 1)];
        if (norm == "sphere") x.normalize();  // normalised power iteration
        const RowVector got = r.snapshots[static_cast<std::size_t>(trial)][static_cast<std::size_t>(t)].row(0);
        INFO("norm " << norm << ", trial " << trial << ", layer " << t);
        CHECK((got - x).norm() <= 1e-12 * x.norm());
      }
    }
  }
}

TEST_CASE("prediction 5: N = d = 2 equilibria A, B and the basin boundary", "[theory]") {
  // Causal mask, W_Q = W_K = 0 (uniform attention), W_V = [[0.5, 1], [0, 1]] (row convention).
  auto run = [](const std::string& norm, const std::string& x0, int layers) {
    const auto cfg = make_config({{"model.tokens", "2"}, {"model.dim", "2"}, {"model.layers", std::to_string(layers)},
                                  {"mask.type", "causal"}, {"weights.q", "zero"}, {"weights.k", "zero"},
                                  {"weights.v", "fixed"}, {"weights.v_matrix", "0.5 1; 0 1"},
                                  {"norm.type", norm}, {"init.type", "fixed"}, {"init.matrix", x0},
                                  {"run.trials", "1"}, {"output.tokens", "final"}});
    const RunResults r = run_simulation(prepare(cfg), 1);
    return std::make_pair(Matrix(r.snapshots[0][0]), r.token[0](0, layers));
  };
  SECTION("without normalisation both tokens meet at one point") {
    const auto [X, mu] = run("none", "0.3 0.9; -0.7 0.2", 80);
    CHECK(mu < 1e-12 * X.norm());
  }
  SECTION("sphere: token 0 goes to (0, +-1)") {
    const auto [Xp, mup] = run("sphere", "0.8 0.6; 0.1 0.2", 200);
    CHECK_THAT(Xp(0, 0), WithinAbs(0.0, 1e-12));
    CHECK_THAT(Xp(0, 1), WithinAbs(1.0, 1e-12));
    // x = alpha (1, -2) + beta (0, 1) in W_V's left eigenvectors (eigenvalues 0.5 and 1): token 0
    // goes to sign(beta) (0, 1), beta = b + 2a. Here beta = -0.96 + 0.56 < 0.
    const auto [Xm, mum] = run("sphere", "0.28 -0.96; 0.1 0.2", 200);
    CHECK_THAT(Xm(0, 1), WithinAbs(-1.0, 1e-12));
  }
  SECTION("token 1 from the first quadrant goes to A = (0, 1): rank one") {
    const auto [X, mu] = run("sphere", "0 1; 0.6 0.8", 200);
    CHECK_THAT(X(1, 0), WithinAbs(0.0, 1e-10));
    CHECK_THAT(X(1, 1), WithinAbs(1.0, 1e-10));
  }
  SECTION("token 1 on the open third-quadrant arc goes to B = (-0.6, -0.8): full rank") {
    const double angle = GENERATE(181.0, 200.0, 240.0, 269.0);
    const double a = angle * M_PI / 180.0;
    const std::string x0 = "0 1; " + std::to_string(std::cos(a)) + " " + std::to_string(std::sin(a));
    const auto [X, mu] = run("sphere", x0, 400);
    INFO("start angle " << angle);
    CHECK_THAT(X(1, 0), WithinAbs(-0.6, 1e-10));
    CHECK_THAT(X(1, 1), WithinAbs(-0.8, 1e-10));
    CHECK(std::abs(X.determinant()) > 0.5);
  }
  SECTION("(-1, 0) is a fixed point, and an unstable one") {
    const auto [X, mu] = run("sphere", "0 1; -1 0", 50);
    CHECK_THAT(X(1, 0), WithinAbs(-1.0, 1e-14));
    CHECK_THAT(X(1, 1), WithinAbs(0.0, 1e-14));
    const auto [Xa, mua] = run("sphere", "0 1; -0.99995 0.01", 600);  // just above: to A
    CHECK_THAT(Xa(1, 1), WithinAbs(1.0, 1e-10));
    const auto [Xb, mub] = run("sphere", "0 1; -0.99995 -0.01", 600);  // just below: to B
    CHECK_THAT(Xb(1, 1), WithinAbs(-0.8, 1e-10));
  }
}
