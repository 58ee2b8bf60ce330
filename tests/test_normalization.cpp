// Row normalisations (docs/science/model-spec.md section 1, step 6).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "kernel/ops/normalization.hpp"
#include "kernel/model/random.hpp"

using namespace rcsim;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

TEST_CASE("normalisations of one row worked by hand", "[norm]") {
  // y = (1, 2, 3, 6): mean 3, centred (-2, -1, 0, 3), population variance 14/4 = 3.5,
  // ||y|| = sqrt(50), mean(y^2) = 12.5.
  Matrix y(1, 4);
  y << 1, 2, 3, 6;
  SECTION("none") {
    Matrix z = y;
    CHECK(normalize_rows(z, Normalization(NormType::none, 4)) == 0);
    CHECK(z == y);
  }
  SECTION("sphere") {
    Matrix z = y;
    normalize_rows(z, Normalization(NormType::sphere, 4));
    CHECK_THAT(z(0, 3), WithinRel(6.0 / std::sqrt(50.0), 1e-15));
  }
  SECTION("projection") {
    Matrix z = y;
    normalize_rows(z, Normalization(NormType::projection, 4));
    CHECK(z(0, 0) == -2.0);
    CHECK(z(0, 3) == 3.0);
  }
  SECTION("layernorm, eps = 0, gain 2, bias 1") {
    Matrix z = y;
    normalize_rows(z, Normalization(NormType::layernorm, 4, 0.0, {2.0}, {1.0}));
    CHECK_THAT(z(0, 0), WithinRel(2.0 * -2.0 / std::sqrt(3.5) + 1.0, 1e-14));
    CHECK_THAT(z(0, 3), WithinRel(2.0 * 3.0 / std::sqrt(3.5) + 1.0, 1e-14));
  }
  SECTION("layernorm, eps = 0.5") {
    Matrix z = y;
    normalize_rows(z, Normalization(NormType::layernorm, 4, 0.5));
    CHECK_THAT(z(0, 1), WithinRel(-1.0 / std::sqrt(4.0), 1e-15));
  }
  SECTION("rmsnorm, eps = 0, per-feature gain") {
    Matrix z = y;
    normalize_rows(z, Normalization(NormType::rmsnorm, 4, 0.0, {1, 1, 1, 10}));
    CHECK_THAT(z(0, 0), WithinRel(1.0 / std::sqrt(12.5), 1e-15));
    CHECK_THAT(z(0, 3), WithinRel(60.0 / std::sqrt(12.5), 1e-15));
  }
}

TEST_CASE("LayerNorm rows have mean 0 and norm sqrt(d) when eps = 0", "[norm]") {
  const int d = GENERATE(2, 3, 16, 64);
  RandomStream rng(3, static_cast<std::uint64_t>(d));
  Matrix Y(10, d);
  rng.fill_normal(Y, 5.0);
  const Matrix Y_in = Y;
  normalize_rows(Y, Normalization(NormType::layernorm, d, 0.0));
  for (int i = 0; i < Y.rows(); ++i) {
    // Centring a nearly constant row cancels digits: the round-off of the mean grows with
    // ||y|| / ||y - mean(y)|| (the row's condition number for centring).
    const RowVector y = Y_in.row(i);
    const double cond = y.norm() / (y.array() - y.mean()).matrix().norm();
    INFO("d = " << d << ", row mean " << Y.row(i).mean() << ", condition " << cond);
    CHECK_THAT(Y.row(i).mean(), WithinAbs(0.0, 8 * d * cond * std::numeric_limits<double>::epsilon()));
    CHECK_THAT(Y.row(i).norm(), WithinRel(std::sqrt(static_cast<double>(d)), 1e-13));
  }
  SECTION("sphere rows have unit norm; projection rows have mean 0; rmsnorm rows norm sqrt(d)") {
    Matrix S(10, d), P(10, d), R(10, d);
    rng.fill_normal(S, 3.0);
    P = S;
    R = S;
    normalize_rows(S, Normalization(NormType::sphere, d));
    normalize_rows(P, Normalization(NormType::projection, d));
    normalize_rows(R, Normalization(NormType::rmsnorm, d, 0.0));
    for (int i = 0; i < 10; ++i) {
      CHECK_THAT(S.row(i).norm(), WithinRel(1.0, 1e-14));
      CHECK_THAT(P.row(i).mean(), WithinAbs(0.0, 1e-14));
      CHECK_THAT(R.row(i).norm(), WithinRel(std::sqrt(static_cast<double>(d)), 1e-13));
    }
  }
}

TEST_CASE("degenerate rows are counted and stay finite", "[norm]") {
  Matrix Y(3, 3);
  Y << 0, 0, 0, 2, 2, 2, 1, 2, 3;
  SECTION("sphere: the zero row stays zero") {
    Matrix Z = Y;
    CHECK(normalize_rows(Z, Normalization(NormType::sphere, 3)) == 1);
    CHECK(Z.allFinite());
    CHECK(Z.row(0).norm() == 0.0);
  }
  SECTION("layernorm, eps = 0: zero and constant rows become the bias") {
    Matrix Z = Y;
    CHECK(normalize_rows(Z, Normalization(NormType::layernorm, 3, 0.0, {}, {0.5})) == 2);
    CHECK(Z.allFinite());
    CHECK(Z(1, 2) == 0.5);
  }
  SECTION("tiny but nonzero rows are normalised, not counted") {
    Matrix Z(1, 2);
    Z << 1e-200, -1e-200;
    CHECK(normalize_rows(Z, Normalization(NormType::sphere, 2)) == 0);
    CHECK_THAT(Z.row(0).norm(), WithinRel(1.0, 1e-15));
    Matrix W(1, 2);
    W << 3e-200, -1e-200;
    CHECK(normalize_rows(W, Normalization(NormType::layernorm, 2, 0.0)) == 0);
    CHECK_THAT(W.row(0).norm(), WithinRel(std::sqrt(2.0), 1e-14));
  }
}
