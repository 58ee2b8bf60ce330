// Weights and initial tokens (docs/science/model-spec.md section 3) and the random streams behind them.
#include <catch2/catch.hpp>

#include <cmath>

#include "config/config.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/model/random.hpp"

using namespace rcsim;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

TEST_CASE("random streams are a pure function of (seed, trial)", "[random]") {
  RandomStream a(42, 3), b(42, 3), c(42, 4), e(43, 3);
  const double x = a.normal();
  CHECK(x == b.normal());
  CHECK(x != c.normal());
  CHECK(x != e.normal());
  for (int i = 0; i < 1000; ++i) {
    const double u = a.uniform();
    CHECK(u > 0.0);
    CHECK(u < 1.0);
  }
}

TEST_CASE("normal deviates have mean 0 and variance 1", "[random]") {
  RandomStream r(1, 0);
  const int n = 200000;
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = r.normal();
    s += x;
    s2 += x * x;
  }
  // Standard errors: 1/sqrt(n) = 0.0022 for the mean, sqrt(2/n) = 0.0032 for the variance.
  CHECK_THAT(s / n, WithinAbs(0.0, 0.011));
  CHECK_THAT(s2 / n, WithinAbs(1.0, 0.016));
}

TEST_CASE("normal deviates: tail probabilities and fourth moment of N(0, 1)", "[random]") {
  // The ziggurat has three paths (rectangles, wedges, the tail beyond r = 3.654): tail
  // probabilities at 1, 2, 3 and r and the fourth moment 3 test all of them.
  // Reference values: P(|x| > a) = erfc(a / sqrt(2)).
  RandomStream r(7, 3);
  const int n = 1000000;
  const double cuts[] = {1.0, 2.0, 3.0, 3.6541528853610088};
  int beyond[4] = {0, 0, 0, 0};
  double s4 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = r.normal();
    s4 += x * x * x * x;
    for (int c = 0; c < 4; ++c) beyond[c] += std::abs(x) > cuts[c] ? 1 : 0;
  }
  for (int c = 0; c < 4; ++c) {
    const double p = std::erfc(cuts[c] / std::sqrt(2.0));
    const double se = std::sqrt(p * (1 - p) / n);
    CHECK_THAT(static_cast<double>(beyond[c]) / n, WithinAbs(p, 5 * se));
  }
  // Var(x^4) = 105 - 9 = 96: standard error sqrt(96 / n) = 0.0098.
  CHECK_THAT(s4 / n, WithinAbs(3.0, 0.05));
}

TEST_CASE("Haar matrices have orthonormal columns (or rows)", "[random]") {
  RandomStream r(5, 0);
  const Matrix Q = r.haar_orthogonal(6, 6);
  CHECK((Q.transpose() * Q - Matrix::Identity(6, 6)).norm() < 1e-14);
  const Matrix T = r.haar_orthogonal(6, 3);
  CHECK((T.transpose() * T - Matrix::Identity(3, 3)).norm() < 1e-14);
  const Matrix W = r.haar_orthogonal(3, 6);
  CHECK((W * W.transpose() - Matrix::Identity(3, 3)).norm() < 1e-14);
}

TEST_CASE("initial tokens: sphere and positive rows are unit vectors", "[inputs]") {
  for (const std::string type : {"sphere", "positive"}) {
    const Config c = make_config({{"model.tokens", "20"}, {"model.dim", "5"}, {"init.type", type}});
    RandomStream r(9, 0);
    const Matrix X = initial_tokens(c, InputArrays{}, 0, r);
    for (int i = 0; i < 20; ++i) CHECK_THAT(X.row(i).norm(), WithinRel(1.0, 1e-14));
    if (type == "positive") CHECK((X.array() >= 0.0).all());
    if (type == "sphere") CHECK((X.array() < 0.0).any());
  }
}

TEST_CASE("shared weights serve every layer, unshared are drawn afresh", "[inputs]") {
  for (const bool shared : {true, false}) {
    const Config c = make_config({{"model.dim", "3"}, {"weights.shared", shared ? "true" : "false"},
                                  {"model.heads", "2"}});
    const InputArrays none;
    WeightSampler s(c, none);
    RandomStream r(1, 0);
    s.begin_trial(r);
    const Matrix v0 = s.layer(0, r).v[1];
    const Matrix q0 = s.layer(0, r).q[0];
    const Matrix v5 = s.layer(5, r).v[1];
    CHECK((v0 == v5) == shared);
    CHECK(q0.rows() == 3);
  }
}

TEST_CASE("gaussian weights have the configured std", "[inputs]") {
  const Config c = make_config({{"model.dim", "40"}, {"weights.v_std", "0.25"}});
  const InputArrays none;
  WeightSampler s(c, none);
  RandomStream r(3, 0);
  s.begin_trial(r);
  const Matrix& v = s.layer(0, r).v[0];
  const double var = v.squaredNorm() / static_cast<double>(v.size());
  // 1600 samples: relative standard error of the variance sqrt(2/1600) = 3.5%.
  CHECK_THAT(std::sqrt(var), WithinRel(0.25, 0.06));
  // default std 1/sqrt(d)
  CHECK_THAT(make_config({{"model.dim", "16"}}).weights.q.std, WithinRel(0.25, 1e-15));
}
