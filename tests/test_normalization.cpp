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

// Dynamic Tanh and Dynamic erf (norm.type = dyt, derf): g f(a y) + b elementwise. The constants are
// tanh and erf at 0.5, 1 and 3 (from Python's math module, not from the code under test).
TEST_CASE("dyt and derf worked by hand, with their tangent and adjoint", "[norm]") {
  const double tanh_half = 0.46211715726000974, tanh_3 = 0.9950547536867305, tanh_1 = 0.7615941559557649;
  const double erf_half = 0.5204998778130465, erf_3 = 0.9999779095030014, erf_1 = 0.8427007929497149;
  Matrix y(1, 4);
  y << 1, 2, 3, 6;
  SECTION("dyt, a = 0.5 (the default), gain 2, bias 1") {
    Matrix z = y;
    const Normalization n(NormType::dyt, 4, 0.0, {2.0}, {1.0});
    CHECK(n.alpha == 0.5);
    CHECK(normalize_rows(z, n) == 0);
    CHECK_THAT(z(0, 0), WithinRel(2.0 * tanh_half + 1.0, 1e-15));
    CHECK_THAT(z(0, 1), WithinRel(2.0 * tanh_1 + 1.0, 1e-15));
    CHECK_THAT(z(0, 3), WithinRel(2.0 * tanh_3 + 1.0, 1e-15));
    // Tangent: d out = g a (1 - tanh^2(a y)) dy; at y = 2 (a y = 1), dy = 1: 2 * 0.5 * (1 - tanh(1)^2).
    Matrix dy = Matrix::Zero(1, 4);
    dy(0, 1) = 1.0;
    CHECK_THAT(norm_jvp(y, dy, n)(0, 1), WithinRel(1.0 - tanh_1 * tanh_1, 1e-14));
    // Adjoint: dL/dg = sum over rows of tanh(a y) dOut, dL/db = sum of dOut.
    RowVector dg, db;
    const Matrix dY = norm_backward(y, dy, n, dg, db);
    CHECK_THAT(dY(0, 1), WithinRel(1.0 - tanh_1 * tanh_1, 1e-14));
    CHECK_THAT(dg(1), WithinRel(tanh_1, 1e-15));
    CHECK(db(1) == 1.0);
    CHECK(dY(0, 0) == 0.0);
  }
  SECTION("derf, a = 1/6, per-feature gain; a = 0 maps every entry to the bias") {
    Matrix z = y;
    normalize_rows(z, Normalization(NormType::derf, 4, 0.0, {1, 1, 1, 10}, {}, 1.0 / 6.0));
    CHECK_THAT(z(0, 2), WithinRel(erf_half, 1e-15));
    CHECK_THAT(z(0, 3), WithinRel(10.0 * erf_1, 1e-15));
    Matrix w = y;
    normalize_rows(w, Normalization(NormType::derf, 4, 0.0, {}, {}, 0.5));
    CHECK_THAT(w(0, 3), WithinRel(erf_3, 1e-15));
    // Tangent: g a (2 / sqrt(pi)) exp(-(a y)^2); at y = 3, a = 1/6: (1/6) (2 / sqrt(pi)) e^(-1/4).
    Matrix dy = Matrix::Zero(1, 4);
    dy(0, 2) = 1.0;
    const double slope = (1.0 / 6.0) * 2.0 / std::sqrt(M_PI) * std::exp(-0.25);
    CHECK_THAT(norm_jvp(y, dy, Normalization(NormType::derf, 4, 0.0, {}, {}, 1.0 / 6.0))(0, 2), WithinRel(slope, 1e-14));
    Matrix c = y;
    normalize_rows(c, Normalization(NormType::dyt, 4, 0.0, {}, {0.25}, 0.0));
    CHECK((c.array() == 0.25).all());
  }
}

TEST_CASE("dyt and derf: the adjoint is the transpose of the tangent (dot-product test)", "[norm]") {
  RandomStream rng(11, 0);
  for (const NormType t : {NormType::dyt, NormType::derf}) {
    Normalization n(t, 5, 1e-5, {}, {}, 0.8);
    n.gain = RowVector::Ones(5);
    n.bias = RowVector::Zero(5);
    Matrix Y(7, 5), dY(7, 5), C(7, 5), g(1, 5);
    rng.fill_normal(Y, 2.0);
    rng.fill_normal(dY, 1.0);
    rng.fill_normal(C, 1.0);
    rng.fill_normal(g, 0.3);
    n.gain += g;
    RowVector dg, db;
    const double lhs = C.cwiseProduct(norm_jvp(Y, dY, n)).sum();
    const double rhs = norm_backward(Y, C, n, dg, db).cwiseProduct(dY).sum();
    INFO((t == NormType::dyt ? "dyt" : "derf"));
    CHECK_THAT(lhs, WithinRel(rhs, 1e-13));
    CHECK(std::abs(lhs) > 1e-3);  // not the trivial 0 = 0
  }
}
