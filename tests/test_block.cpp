// Transformer-block structure: norm.position, dropout, run.precision.
// The placements are also checked against NumPy by tests/reference/check_blocks_numpy.py.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim_support.hpp"
#include "io/inputs.hpp"
#include "config/config.hpp"
#include "kernel/model/random.hpp"
#include "kernel/ops/dropout.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/ops/attention.hpp"
#include "kernel/trial/simulation.hpp"

using namespace rcsim;
using rcsim::test::simulate;
using rcsim::test::check_matrix;
using Catch::Matchers::WithinRel;

namespace {

// One layer of the hand-worked 2 x 2 case: W_Q = W_K = 0 (uniform attention on the complete
// mask, A = [[1/2, 1/2], [1/2, 1/2]]), W_V = I, N = sphere, X(0) = [[3, 4], [0, 2]].
Matrix one_layer(const std::string& position, const std::string& alpha) {
  const RunResults r = simulate({{"model.tokens", "2"}, {"model.dim", "2"}, {"model.layers", "1"},
                                 {"weights.q", "zero"}, {"weights.k", "zero"}, {"weights.v", "identity"},
                                 {"norm.type", "sphere"}, {"norm.position", position},
                                 {"residual.alpha", alpha}, {"init.type", "fixed"}, {"init.matrix", "3 4; 0 2"},
                                 {"run.trials", "1"}, {"output.tokens", "final"}});
  return r.snapshots[0][0];
}

}  // namespace

TEST_CASE("norm.position: the 2 x 2 case worked by hand", "[block]") {
  // N(X) = [[0.6, 0.8], [0, 1]]; A N(X) = its mean row [0.3, 0.9] in both rows.
  // A X = mean row of X = [1.5, 3].
  const double s10 = std::sqrt(10.0);
  Matrix want(2, 2);
  SECTION("post with residual: N(X + A X) = [[4.5, 7] / sqrt(69.25), [1.5, 5] / sqrt(27.25)]") {
    want << 4.5 / std::sqrt(69.25), 7 / std::sqrt(69.25), 1.5 / std::sqrt(27.25), 5 / std::sqrt(27.25);
    check_matrix(one_layer("post", "1"), want);
  }
  SECTION("pre with residual: X + A N(X) = [[3.3, 4.9], [0.3, 2.9]]") {
    want << 3.3, 4.9, 0.3, 2.9;
    check_matrix(one_layer("pre", "1"), want);
  }
  SECTION("pre without residual: A N(X) = [[0.3, 0.9], [0.3, 0.9]]") {
    want << 0.3, 0.9, 0.3, 0.9;
    check_matrix(one_layer("pre", "0"), want);
  }
  SECTION("peri with residual: X + N(A N(X)), N([0.3, 0.9]) = [1, 3] / sqrt(10)") {
    want << 3 + 1 / s10, 4 + 3 / s10, 1 / s10, 2 + 3 / s10;
    check_matrix(one_layer("peri", "1"), want);
  }
  SECTION("peri with residual weight 0.5") {
    want << 3 + 0.5 / s10, 4 + 1.5 / s10, 0.5 / s10, 2 + 1.5 / s10;
    check_matrix(one_layer("peri", "0.5"), want);
  }
}

TEST_CASE("norm.position and dropout keys: bad values are usage errors naming the key", "[block][config]") {
  CHECK_THROWS_WITH(make_config({{"norm.position", "middle"}}), Catch::Contains("norm.position"));
  CHECK_THROWS_WITH(make_config({{"dropout.attention", "1"}}), Catch::Contains("dropout.attention"));
  CHECK_THROWS_WITH(make_config({{"dropout.output", "-0.1"}}), Catch::Contains("dropout.output"));
  CHECK_THROWS_WITH(make_config({{"run.precision", "half"}}), Catch::Contains("run.precision"));
  CHECK_THROWS_WITH(make_config({{"norm.position", "pre"}, {"residual.alpha", "1"}, {"residual.project", "tangent"}}),
                    Catch::Contains("norm.position"));
}

TEST_CASE("dropout: zeros stay zero, kept entries are scaled by 1/(1-p)", "[block][dropout]") {
  // A causal masked softmax: the upper triangle is masked out (exactly 0).
  const int n = 40;
  Matrix S = Matrix::Ones(n, n);
  const MaskMatrix mask = causal_mask(n);
  masked_softmax(S, mask);
  const Matrix before = S;
  RandomStream rng(7, 0, kDropoutStream);
  const double p = 0.25;
  apply_dropout(S, p, rng);
  int dropped = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (j > i) {
        CHECK(S(i, j) == 0.0);
      } else if (S(i, j) == 0.0) {
        ++dropped;
      } else {
        CHECK(S(i, j) == before(i, j) * (1.0 / (1.0 - p)));
      }
    }
  CHECK(dropped > 0);
  RandomStream again(7, 0, kDropoutStream);
  Matrix same = before;
  apply_dropout(same, 0.0, again);  // p = 0: no change, no draw
  CHECK(same == before);
  CHECK(again.uniform() == RandomStream(7, 0, kDropoutStream).uniform());
}

TEST_CASE("dropout: the mean of every entry is preserved", "[block][dropout]") {
  // 200 x 500 ones, p = 0.3: each entry is 0 or 1/(1-p), mean 1, variance p/(1-p). The sample mean
  // must lie within 5 standard errors of 1 (fails with probability 6e-7 for a correct dropout; a
  // missing 1/(1-p) gives 0.7, 250 standard errors away), the dropped fraction within 5 binomial
  // standard errors of p.
  const double p = 0.3;
  Matrix m = Matrix::Ones(200, 500);
  RandomStream rng(20261123, 3, kDropoutStream);
  apply_dropout(m, p, rng);
  const double n = static_cast<double>(m.size());
  const double se_mean = std::sqrt(p / (1.0 - p) / n);
  CHECK(std::abs(m.mean() - 1.0) < 5.0 * se_mean);
  const double dropped = static_cast<double>((m.array() == 0.0).count()) / n;
  CHECK(std::abs(dropped - p) < 5.0 * std::sqrt(p * (1.0 - p) / n));
}

TEST_CASE("dropout in a run: p = 0 is today's run, p > 0 is deterministic and thread invariant", "[block][dropout]") {
  std::map<std::string, std::string> v = {{"model.tokens", "12"}, {"model.dim", "6"},   {"model.layers", "20"},
                                          {"model.heads", "2"},   {"mask.type", "causal"}, {"norm.type", "layernorm"},
                                          {"run.trials", "6"},    {"residual.alpha", "1"}};
  const RunResults plain = simulate(v);
  auto zero = v;
  zero["dropout.attention"] = "0";
  zero["dropout.output"] = "0";
  const RunResults zeroed = simulate(zero);
  for (std::size_t m = 0; m < plain.token.size(); ++m) CHECK(plain.token[m] == zeroed.token[m]);
  auto drop = v;
  drop["dropout.attention"] = "0.1";
  drop["dropout.output"] = "0.2";
  const RunResults one = simulate(drop, 1);
  const RunResults two = simulate(drop, 2);
  for (std::size_t m = 0; m < one.token.size(); ++m) CHECK(one.token[m] == two.token[m]);
  for (std::size_t m = 0; m < one.attention.size(); ++m) CHECK(one.attention[m] == two.attention[m]);
  // Dropout draws from its own stream: the inputs (layer 0) and the first layer's attention
  // statistics (computed before dropout) are those of the run without it; later layers differ.
  CHECK(one.token[0].col(0) == plain.token[0].col(0));
  CHECK(one.attention[1].col(0) == plain.attention[1].col(0));
  CHECK(one.token[0].col(1) != plain.token[0].col(1));
}

TEST_CASE("run.precision = float32: tokens are float32 numbers and mu_rel stops at float32 round-off", "[block][precision]") {
  // layernorm, complete mask, N = d = 16, 200 layers, 8 trials. In float64 the tokens approach
  // each other down to mu_rel ~ 1e-16 (then they become bitwise identical, mu = 0). With float32
  // tokens two tokens that still differ differ by at least about one float32 spacing (1.2e-7
  // relative), so the smallest nonzero mu_rel stays far above float64's: measured 6e-8 .. 2e-4
  // (median 4e-6) against 1e-17 .. 1.2e-16.
  std::map<std::string, std::string> v = {{"model.tokens", "16"}, {"model.dim", "16"},   {"model.layers", "200"},
                                          {"norm.type", "layernorm"}, {"run.trials", "8"}, {"output.tokens", "1,2,3"}};
  const RunResults f64 = simulate(v);
  v["run.precision"] = "float32";
  const RunResults f32 = simulate(v);
  auto smallest_positive = [](const RunResults& r, int trial) {
    double m = std::numeric_limits<double>::infinity();
    for (int t = 0; t <= r.layers; ++t)
      if (r.token[1](trial, t) > 0.0) m = std::min(m, r.token[1](trial, t));
    return m;
  };
  std::vector<double> floors;
  for (int trial = 0; trial < 8; ++trial) {
    CHECK(smallest_positive(f64, trial) < 1e-13);
    const double f = smallest_positive(f32, trial);
    CHECK(f > 1e-11);  // 2 orders above float64's largest; the smallest float32 value depends on the build
                       // (measured 7e-10 with -DRCSIM_NATIVE=OFF, above 1e-9 with AVX-512)
    floors.push_back(f);
    for (const Matrix& X : f32.snapshots[static_cast<std::size_t>(trial)])
      CHECK(X == X.cast<float>().cast<double>());  // exactly representable in float32
  }
  std::sort(floors.begin(), floors.end());
  INFO("median smallest nonzero float32 mu_rel " << floors[4]);
  CHECK(floors[4] > 1e-8);
  CHECK(floors[4] < 1e-3);
  // The inputs are rounded too: layer 0 differs from float64 at float32 precision only.
  for (int trial = 0; trial < 8; ++trial)
    CHECK_THAT(f32.token[0](trial, 0), WithinRel(f64.token[0](trial, 0), 1e-6));
}

TEST_CASE("prediction 4: LayerNorm with orthogonal W_V collapses inputs in one hemisphere", "[theory][block]") {
  // docs/science/model-spec.md section 5, item 4: inputs in the positive orthant (one hemisphere), fresh Haar
  // orthogonal W_V per layer (norm preserving), layernorm, complete mask: mu_rel -> 0 (measured:
  // below 1e-15 by layer 5 in every trial, exactly 0 (bitwise identical tokens) soon after).
  for (const char* shared : {"false", "true"}) {
    const RunResults r = simulate({{"model.tokens", "8"}, {"model.dim", "6"}, {"model.layers", "60"},
                                   {"norm.type", "layernorm"}, {"weights.v", "orthogonal"},
                                   {"weights.shared", shared}, {"init.type", "positive"}, {"run.trials", "8"}});
    for (int trial = 0; trial < r.trials; ++trial) {
      INFO("weights.shared = " << shared << ", trial " << trial);
      CHECK(r.token[1](trial, 0) > 0.3);  // the inputs are spread out
      CHECK(r.token[1](trial, r.layers) < 1e-14);
      CHECK(r.token[2](trial, r.layers) > 1.0);  // ... to one point, not to zero: ||X||_F stays ~ sqrt(N d)
    }
  }
}

TEST_CASE("run.precision = float32 computes the layer in float: the round-off floor of mu_rel", "[block][precision]") {
  // LayerNorm fixes the token scale, so with the causal mask (rows never bitwise equal) mu_rel
  // stops at the round-off floor of the arithmetic. Measured (N = 32, d = 16, 2 heads, layers
  // 200 .. 300, 8 trials): float64 2.1e-16 in every trial; float32 arithmetic 1.2e-7 (float
  // epsilon) in every trial, never 0. Only rounding the tokens to float32 between float64 layers
  // (the former emulation) makes the tokens bitwise identical (mu_rel = 0 from layer ~100 on), so
  // this test fails without float arithmetic inside the layer.
  std::map<std::string, std::string> v = {{"model.tokens", "32"}, {"model.dim", "16"}, {"model.heads", "2"},
                                          {"mask.type", "causal"}, {"model.layers", "300"},
                                          {"norm.type", "layernorm"}, {"run.trials", "8"}};
  const RunResults f64 = simulate(v);
  v["run.precision"] = "float32";
  const RunResults f32 = simulate(v);
  for (int trial = 0; trial < 8; ++trial) {
    std::vector<double> late64, late32;
    for (int t = 200; t <= 300; ++t) {
      late64.push_back(f64.token[1](trial, t));
      late32.push_back(f32.token[1](trial, t));
    }
    std::sort(late64.begin(), late64.end());
    std::sort(late32.begin(), late32.end());
    INFO("trial " << trial << ": median mu_rel float64 " << late64[50] << ", float32 " << late32[50]);
    CHECK(late64[50] > 1e-17);
    CHECK(late64[50] < 1e-14);
    CHECK(late32[0] > 0.0);  // never bitwise identical tokens
    CHECK(late32[50] > 1e-8);
    CHECK(late32[50] < 1e-5);
  }
}

// --- Variants (docs/science/gradients.md, "Variants") ---

namespace {

// One layer of the 2 x 2 case above (uniform attention, W_V = I, X(0) = [[3, 4], [0, 2]], A X =
// [[1.5, 3], [1.5, 3]]) with extra keys; float64 or float32.
Matrix one_variant_layer(std::map<std::string, std::string> extra, const std::string& precision = "float64") {
  std::map<std::string, std::string> k = {{"model.tokens", "2"},   {"model.dim", "2"},      {"model.layers", "1"},
                                          {"weights.q", "zero"},   {"weights.k", "zero"},   {"weights.v", "identity"},
                                          {"init.type", "fixed"},  {"init.matrix", "3 4; 0 2"}, {"run.trials", "1"},
                                          {"output.tokens", "final"}, {"run.precision", precision}};
  for (const auto& [key, value] : extra) k[key] = value;
  return simulate(k).snapshots[0][0];
}

void check_matrix_tol(const Matrix& got, const Matrix& want, double tol) {
  for (Eigen::Index i = 0; i < got.rows(); ++i)
    for (Eigen::Index j = 0; j < got.cols(); ++j) CHECK_THAT(got(i, j), WithinRel(want(i, j), tol));
}

}  // namespace

TEST_CASE("skip and branch gains: the 2 x 2 case worked by hand, float64 and float32", "[block][variants]") {
  Matrix want(2, 2);
  for (const std::string precision : {"float64", "float32"}) {
    const double tol = precision == "float64" ? 1e-14 : 1e-6;
    SECTION("post, a = 0.5: 0.5 X + A X = [[3, 5], [1.5, 4]] (" + precision + ")") {
      want << 3, 5, 1.5, 4;
      check_matrix_tol(one_variant_layer({{"residual.alpha", "1"}, {"residual.skip", "0.5"}}, precision), want, tol);
    }
    SECTION("pre, sphere, a = 0.5: 0.5 X + A N(X) = [[1.8, 2.9], [0.3, 1.9]] (" + precision + ")") {
      want << 1.8, 2.9, 0.3, 1.9;
      check_matrix_tol(one_variant_layer({{"residual.alpha", "1"}, {"residual.skip", "0.5"}, {"norm.type", "sphere"},
                                          {"norm.position", "pre"}}, precision), want, tol);
    }
    SECTION("peri, sphere, a = 0.5, b = 2: 0.5 X + 2 N(A N(X)), N(A N(X)) = [0.3, 0.9] / sqrt(0.9) (" + precision +
            ")") {
      const double r = std::sqrt(0.9);
      want << 1.5 + 0.6 / r, 2 + 1.8 / r, 0.6 / r, 1 + 1.8 / r;
      check_matrix_tol(one_variant_layer({{"residual.alpha", "2"}, {"residual.skip", "0.5"}, {"norm.type", "sphere"},
                                          {"norm.position", "peri"}}, precision), want, tol);
    }
    SECTION("cowsik, alpha = 0.6: 0.8 X + 0.6 A X = [[3.3, 5], [0.9, 3.4]] (" + precision + ")") {
      want << 3.3, 5, 0.9, 3.4;
      check_matrix_tol(one_variant_layer({{"residual.alpha", "0.6"}, {"residual.mixing", "cowsik"}}, precision), want,
                       tol);
    }
    SECTION("deepnorm, L = 1: 2^(1/4) X + A X 8^(-1/4) (W_V = 8^(-1/4) I) (" + precision + ")") {
      const double a = std::pow(2.0, 0.25), b = std::pow(8.0, -0.25);
      want << 3 * a + 1.5 * b, 4 * a + 3 * b, 1.5 * b, 2 * a + 3 * b;
      check_matrix_tol(one_variant_layer({{"residual.alpha", "1"}, {"residual.mixing", "deepnorm"}}, precision), want,
                       tol);
    }
  }
}

TEST_CASE("shaped attention: the 2 x 2 case worked by hand, float64 and float32", "[block][variants]") {
  // Uniform attention; a = 2, b = 1, c = 1. Complete mask: C = A, A_s = A + I = [[1.5, .5], [.5, 1.5]],
  // A_s X = [[4.5, 7], [1.5, 5]]. Causal: A = C = [[1, 0], [.5, .5]], A_s = [[2, 0], [.5, 1.5]],
  // A_s X = [[6, 8], [1.5, 5]]. Gap removal (1, 0, 1) with uniform attention: A - C = 0.
  Matrix want(2, 2);
  const std::map<std::string, std::string> shaped = {
      {"attention.shape_a", "2"}, {"attention.shape_b", "1"}, {"attention.shape_c", "1"}};
  for (const std::string precision : {"float64", "float32"}) {
    const double tol = precision == "float64" ? 1e-14 : 1e-6;
    SECTION("complete (" + precision + ")") {
      want << 4.5, 7, 1.5, 5;
      check_matrix_tol(one_variant_layer(shaped, precision), want, tol);
    }
    SECTION("causal (" + precision + ")") {
      auto k = shaped;
      k["mask.type"] = "causal";
      want << 6, 8, 1.5, 5;
      check_matrix_tol(one_variant_layer(k, precision), want, tol);
    }
    SECTION("gap removal, causal, with residual: X + (A - C) X = X (" + precision + ")") {
      want << 3, 4, 0, 2;
      check_matrix_tol(one_variant_layer({{"attention.shape_c", "1"}, {"mask.type", "causal"}, {"residual.alpha", "1"}},
                                         precision), want, tol);
    }
  }
}

TEST_CASE("logit biases (ALiBi, decay): the 3 x 2 case worked by hand, float64 and float32", "[block][variants]") {
  // W_Q = W_K = 0: the logits are B alone, A = softmax(B) on the mask, W_V = I, X rows (3, 4), (0, 2), (1, 1).
  // Decay, gamma = 1/2, causal: rows [1], [1/3, 2/3], [1/7, 2/7, 4/7]: A X = [[3, 4], [1, 8/3], [1, 12/7]];
  // row 0 takes nothing from the later rows (masked entries exactly 0). Complete: B_ij = |i - j| log gamma,
  // rows [4, 2, 1] / 7, [1, 2, 1] / 4, [1, 2, 4] / 7: A X = [[13/7, 3], [1, 9/4], [1, 12/7]].
  // ALiBi, H = 1 (m = 1/256), causal: row 1 = (e^-m x_0 + x_1) / (1 + e^-m).
  Matrix want(3, 2);
  const std::map<std::string, std::string> base = {{"model.tokens", "3"}, {"init.matrix", "3 4; 0 2; 1 1"}};
  for (const std::string precision : {"float64", "float32"}) {
    const double tol = precision == "float64" ? 1e-14 : 1e-6;
    auto decay = base;
    decay["attention.logit_bias"] = "decay";
    decay["attention.decay"] = "0.5";
    SECTION("decay, causal (" + precision + ")") {
      decay["mask.type"] = "causal";
      want << 3, 4, 1, 8.0 / 3, 1, 12.0 / 7;
      const Matrix got = one_variant_layer(decay, precision);
      check_matrix_tol(got, want, tol);
      CHECK(got(0, 0) == 3.0);  // exactly: the masked entries contribute exactly 0
      CHECK(got(0, 1) == 4.0);
    }
    SECTION("decay, complete (" + precision + ")") {
      want << 13.0 / 7, 3, 1, 9.0 / 4, 1, 12.0 / 7;
      check_matrix_tol(one_variant_layer(decay, precision), want, tol);
    }
    SECTION("alibi, causal, H = 1 (" + precision + ")") {
      auto k = base;
      k["attention.logit_bias"] = "alibi";
      k["mask.type"] = "causal";
      const double e1 = std::exp(-1.0 / 256), e2 = std::exp(-2.0 / 256);
      const double z1 = 1 + e1, z2 = 1 + e1 + e2;
      want << 3, 4, 3 * e1 / z1, (4 * e1 + 2) / z1, (3 * e2 + 1) / z2, (4 * e2 + 2 * e1 + 1) / z2;
      check_matrix_tol(one_variant_layer(k, precision), want, tol);
    }
  }
}

TEST_CASE("QK-normalisation: the 2 x 2 case worked by hand, float64 and float32", "[block][variants]") {
  // W_Q = W_K = W_V = I, X rows (3, 4), (0, 2): q_0 = k_0 = (0.6, 0.8) s, q_1 = k_1 = (0, 1) s, the logits
  // sqrt(2) s^2 [[1, 0.8], [0.8, 1]]; with c = 0.2 sqrt(2) s^2, p = 1 / (1 + e^-c), q = 1 - p:
  // A X = [[3p, 4p + 2q], [3q, 4q + 2p]]. The attention does not change when X is scaled by 10.
  Matrix want(2, 2);
  for (const std::string precision : {"float64", "float32"}) {
    const double tol = precision == "float64" ? 1e-14 : 1e-6;
    for (const double s : {1.0, 2.0}) {
      const double c = 0.2 * std::sqrt(2.0) * s * s, p = 1 / (1 + std::exp(-c)), q = 1 - p;
      std::map<std::string, std::string> k = {{"weights.q", "identity"},    {"weights.k", "identity"},
                                              {"attention.qk_norm", "true"}, {"attention.qk_scale", std::to_string(s)}};
      SECTION("s = " + std::to_string(s) + " (" + precision + ")") {
        want << 3 * p, 4 * p + 2 * q, 3 * q, 4 * q + 2 * p;
        check_matrix_tol(one_variant_layer(k, precision), want, tol);
        k["init.matrix"] = "30 40; 0 20";
        check_matrix_tol(one_variant_layer(k, precision), 10 * want, tol);
      }
    }
  }
}

TEST_CASE("depth scaling: the 2 x 2 cases worked by hand, float64 and float32", "[block][variants]") {
  // Uniform attention (W_Q = W_K = 0), W_V = I: A Z = 1 mean(Z)^T, mean(X) = m = (1.5, 3).
  // residual.depth_scaling, L = 4, alpha = 1: X <- X + 0.5 1 mean(X)^T four times; the mean grows by 1.5
  // per layer, so X(4) = X + 0.5 (1 + 1.5 + 2.25 + 3.375) 1 m^T = X + 4.0625 1 m^T.
  // norm.depth_scaling, pre, norm.type none, L = 2: X(1) = X + 1 m^T (mean 2m), X(2) = X(1) + 2m / sqrt(2),
  // so X(2) = X + (1 + sqrt(2)) 1 m^T.
  Matrix want(2, 2);
  for (const std::string precision : {"float64", "float32"}) {
    const double tol = precision == "float64" ? 1e-14 : 1e-6;
    SECTION("residual 1/sqrt(L) (" + precision + ")") {
      want << 3 + 4.0625 * 1.5, 4 + 4.0625 * 3, 4.0625 * 1.5, 2 + 4.0625 * 3;
      check_matrix_tol(one_variant_layer({{"model.layers", "4"},
                                          {"residual.alpha", "1"},
                                          {"residual.depth_scaling", "inv_sqrt_depth"}},
                                         precision),
                       want, tol);
    }
    SECTION("LayerNorm 1/sqrt(l) (" + precision + ")") {
      const double f = 1 + std::sqrt(2.0);
      want << 3 + 1.5 * f, 4 + 3 * f, 1.5 * f, 2 + 3 * f;
      check_matrix_tol(one_variant_layer({{"model.layers", "2"},
                                          {"residual.alpha", "1"},
                                          {"norm.position", "pre"},
                                          {"norm.depth_scaling", "inv_sqrt_layer"}},
                                         precision),
                       want, tol);
    }
  }
}
