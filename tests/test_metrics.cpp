// Measures of a token matrix (docs/science/model-spec.md section 4).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include <vector>

#include <Eigen/SVD>

#include "kernel/measures/metrics.hpp"
#include "kernel/model/random.hpp"

using namespace rcsim;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

TEST_CASE("token similarity worked by hand", "[metrics]") {
  // Tokens (0,0), (2,0), (4,3)... mean (2, 1); deviations (-2,-1), (0,-1), (2,2): squares 5+1+8.
  Matrix X(3, 2);
  X << 0, 0, 2, 0, 4, 3;
  CHECK_THAT(token_similarity(X), WithinRel(std::sqrt(14.0), 1e-15));
  SECTION("identical tokens: mu = 0") { CHECK(token_similarity(Matrix::Constant(4, 3, 1.7)) == 0.0); }
}

TEST_CASE("mu is invariant under adding the same vector to every token", "[metrics]") {
  RandomStream rng(11, 0);
  Matrix X(9, 5);
  rng.fill_normal(X);
  RowVector v(5);
  v << 3, -1, 0.5, 10, 2;
  const Matrix Y = X.rowwise() + v;
  CHECK_THAT(token_similarity(Y), WithinRel(token_similarity(X), 1e-13));
}

TEST_CASE("mu far below 1e-154 does not underflow", "[metrics]") {
  Matrix X(2, 1);
  X << 1e-200, -1e-200;
  CHECK_THAT(token_similarity(X), WithinRel(std::sqrt(2.0) * 1e-200, 1e-14));
}

TEST_CASE("singular values worked by hand", "[metrics]") {
  // diag(3, 4) in a 3 x 2 matrix has singular values 4 and 3.
  Matrix X = Matrix::Zero(3, 2);
  X(0, 0) = 3;
  X(1, 1) = 4;
  const Vector s = singular_values(X);
  REQUIRE(s.size() == 2);
  CHECK_THAT(s(0), WithinRel(4.0, 1e-15));
  CHECK_THAT(s(1), WithinRel(3.0, 1e-15));
  CHECK_THAT(rank_one_residual(s), WithinRel(3.0 / 5.0, 1e-15));
  CHECK_THAT(stable_rank(s), WithinRel(25.0 / 16.0, 1e-15));
}

TEST_CASE("rank of a rank-k product is k", "[metrics]") {
  const int n = 12, d = 8;
  const int k = GENERATE(0, 1, 2, 5, 8);
  RandomStream rng(5, static_cast<std::uint64_t>(k));
  Matrix A(n, std::max(k, 1)), B(std::max(k, 1), d);
  rng.fill_normal(A);
  rng.fill_normal(B);
  const Matrix X = k == 0 ? Matrix::Zero(n, d) : Matrix(A * B);
  const Vector s = singular_values(X);
  const double rtol = std::max(n, d) * std::numeric_limits<double>::epsilon();
  CHECK(numerical_rank(s, rtol, 0.0) == k);
  SECTION("an absolute tolerance above every singular value gives rank 0") {
    CHECK(numerical_rank(s, rtol, 1e300) == 0);
  }
}

TEST_CASE("antipodal clusters: mu > 0 but rank one", "[metrics]") {
  Matrix X(4, 3);
  X << 1, 2, 3, -1, -2, -3, 1, 2, 3, -1, -2, -3;
  const Vector s = singular_values(X);
  CHECK(token_similarity(X) > 1.0);
  CHECK_THAT(rank_one_residual(s), WithinAbs(0.0, 1e-15));
  CHECK(numerical_rank(s, 4 * std::numeric_limits<double>::epsilon(), 0.0) == 1);
  CHECK_THAT(cos_abs_mean(X), WithinRel(1.0, 1e-15));
}

TEST_CASE("mean absolute cosine worked by hand", "[metrics]") {
  // Tokens e1, e2, (e1 + e2)/sqrt 2: |cos| pairs 0, 1/sqrt2, 1/sqrt2 (each counted twice).
  Matrix X(3, 2);
  X << 1, 0, 0, 1, 1, 1;
  CHECK_THAT(cos_abs_mean(X), WithinRel(2.0 / 3.0 / std::sqrt(2.0), 1e-15));
  SECTION("a zero token is left out; rows near under- and overflow keep their direction") {
    // The same three directions, scaled by 1e-200 and 1e200 (their squared norms under- and
    // overflow: the scaled norm is used), and a zero row in between.
    Matrix Y(4, 2);
    Y << 1, 0, 0, 0, 0, 1e-200, 1e200, 1e200;
    CHECK_THAT(cos_abs_mean(Y), WithinRel(2.0 / 3.0 / std::sqrt(2.0), 1e-15));
  }
  SECTION("subnormal rows keep their direction and the mean stays in [0, 1]") {
    // Rows proportional to (1, 0), (2, 1), (1, 1) with exact subnormal entries 2^-1030, 2^-1029:
    // 1/norm would overflow. |cos| pairs: 2/sqrt5, 1/sqrt2, 3/sqrt10 (worked by hand).
    const double a = std::ldexp(1.0, -1030);
    REQUIRE(a < std::numeric_limits<double>::min());
    Matrix S(3, 2);
    S << a, 0, 2 * a, a, a, a;
    const double expected = (2 / std::sqrt(5.0) + 1 / std::sqrt(2.0) + 3 / std::sqrt(10.0)) / 3;
    CHECK_THAT(cos_abs_mean(S), WithinRel(expected, 1e-15));
    // Identical tokens, one of them normal and one subnormal: exactly 1, never above.
    Matrix T(3, 3);
    T << 3e-310, 1e-310, 2e-310, 3e-310, 1e-310, 2e-310, 3, 1, 2;
    const double c = cos_abs_mean(T);
    CHECK(std::isfinite(c));
    CHECK(c <= 1.0);
    CHECK_THAT(c, WithinRel(1.0, 1e-12));
  }
  SECTION("zero tokens are left out; one nonzero token is undefined") {
    Matrix Z = Matrix::Zero(3, 2);
    Z(0, 0) = 1;
    CHECK(std::isnan(cos_abs_mean(Z)));
  }
}

TEST_CASE("mu_rel of a zero matrix is 0 (all tokens identical), not 0/0", "[metrics]") {
  Vector s;
  const TokenMeasures m = measure_tokens(Matrix::Zero(4, 3), MeasureOptions{1e-15, 0.0, 3}, s);
  CHECK(m.mu == 0.0);
  CHECK(m.fro_norm == 0.0);
  CHECK(m.mu_rel == 0.0);
}

TEST_CASE("mean absolute cosine against the pairwise definition across row blocks", "[metrics]") {
  // cos_abs_mean forms the Gram matrix 64 rows at a time: sizes below, at and across block
  // edges (a partial last block), one zero token left out; the reference is the definition,
  // pair by pair (k = 150 - 1 nonzero tokens for N = 150).
  for (const int n : {2, 63, 64, 65, 129, 150}) {
    Matrix X = Matrix::Random(n, 7);
    if (n > 2) X.row(n / 2).setZero();
    double sum = 0.0;
    int pairs = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        if (i == j || X.row(i).norm() == 0.0 || X.row(j).norm() == 0.0) continue;
        sum += std::abs(X.row(i).dot(X.row(j))) / (X.row(i).norm() * X.row(j).norm());
        ++pairs;
      }
    INFO("N = " << n);
    CHECK_THAT(cos_abs_mean(X), WithinRel(sum / pairs, 1e-13));
  }
}

TEST_CASE("measure_tokens ties the measures together", "[metrics]") {
  RandomStream rng(2, 0);
  Matrix X(6, 4);
  rng.fill_normal(X);
  Vector s;
  const TokenMeasures m = measure_tokens(X, {1e-14, 0.0, 3}, s);
  CHECK_THAT(m.fro_norm, WithinRel(s.norm(), 1e-14));
  CHECK_THAT(m.mu_rel, WithinRel(m.mu / m.fro_norm, 1e-15));
  CHECK(m.sigma_max == s(0));
  CHECK(m.sigma_min == s(3));
  CHECK(m.sigma_at_max_rank == s(2));
  CHECK(m.rank == 4);
}

TEST_CASE("singular values (QR, bidiagonalisation, dqds) equal Eigen's BDCSVD of X", "[metrics]") {
  // BDCSVD of the whole matrix is the independent reference (Eigen's divide and conquer; both
  // are backward stable, so they agree to a few eps * sigma_max). Shapes cover both orientations
  // and both sides of the QR threshold (rows >= 5/3 columns), rank-deficient products, a zero
  // matrix, one row or column, and scales near under- and overflow.
  RandomStream rng(11, 0);
  auto gaussian = [&](int r, int c) {
    Matrix A(r, c);
    rng.fill_normal(A);
    return A;
  };
  std::vector<Matrix> cases = {gaussian(512, 16),
                               gaussian(200, 64),
                               gaussian(64, 64),
                               gaussian(80, 64),
                               gaussian(30, 100),
                               gaussian(16, 128),
                               gaussian(1, 5),
                               gaussian(5, 1),
                               gaussian(100, 3) * gaussian(3, 20),   // rank 3, tall
                               gaussian(20, 1) * gaussian(1, 90),    // rank 1, wide
                               gaussian(128, 7) * gaussian(7, 128),  // rank 7, square
                               Matrix::Zero(6, 4),
                               gaussian(40, 12) * 1e-200,
                               gaussian(40, 12) * 1e200};
  for (const Matrix& X : cases) {
    const Vector s = singular_values(X);
    Eigen::BDCSVD<Matrix> ref(X);
    const Vector r = ref.singularValues();
    REQUIRE(s.size() == r.size());
    const double scale = std::max(r(0), std::numeric_limits<double>::min());
    INFO(X.rows() << " x " << X.cols() << ", sigma_max " << r(0));
    CHECK((s - r).cwiseAbs().maxCoeff() <= 1e-13 * scale);
    for (Eigen::Index i = 1; i < s.size(); ++i) CHECK(s(i) <= s(i - 1));  // descending
  }
}

TEST_CASE("singular values from the R factor of 16-column QR panels equal BDCSVD of X", "[metrics]") {
  // For k = min(N, d) > 32 singular_values factors the tall orientation by Householder QR in
  // panels of 16 columns (qr_block_size), then takes the singular values of R. Reference:
  // Eigen's BDCSVD of X itself (no QR), to 1e-13 sigma_max. Shapes: the benchmark's 128 x 64
  // with centred rows (LayerNorm tokens: X 1 = 0, so one singular value is at rounding level),
  // a partial last panel (90 x 33, k = 33), k = 128 (unblocked bidiagonalisation) and
  // k = 150 (blocked), wide (QR of X^T), and a rank-5 product.
  REQUIRE(qr_block_size(32) == 48);  // k <= 32: one panel, as Eigen's HouseholderQR
  REQUIRE(qr_block_size(33) == 16);
  RandomStream rng(13, 0);
  auto gaussian = [&](int r, int c) {
    Matrix A(r, c);
    rng.fill_normal(A);
    return A;
  };
  Matrix centred = gaussian(128, 64);
  centred.colwise() -= centred.rowwise().mean();
  const std::vector<Matrix> cases = {centred,         gaussian(90, 33),  gaussian(512, 128),
                                     gaussian(400, 150), gaussian(48, 150), gaussian(300, 5) * gaussian(5, 80)};
  for (const Matrix& X : cases) {
    const Vector s = singular_values(X);
    const Vector r = Eigen::BDCSVD<Matrix>(X).singularValues();
    REQUIRE(s.size() == r.size());
    INFO(X.rows() << " x " << X.cols() << ", sigma_max " << r(0));
    CHECK((s - r).cwiseAbs().maxCoeff() <= 1e-13 * r(0));
    for (Eigen::Index i = 1; i < s.size(); ++i) CHECK(s(i) <= s(i - 1));
  }
  // The centred matrix has a singular value at rounding level (its rows sum to zero).
  CHECK(singular_values(centred)(63) <= 1e-13 * singular_values(centred)(0));
}

TEST_CASE("all_finite agrees with the entry-by-entry test", "[metrics]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  Matrix X = Matrix::Constant(37, 5, 1.7e308);  // finite, and its sum would overflow
  CHECK(all_finite(X));
  CHECK(all_finite(Matrix(0, 3)));
  CHECK(all_finite(-X));
  for (const double bad : {inf, -inf, nan}) {
    for (const auto& [i, j] : {std::pair{0, 0}, std::pair{36, 4}, std::pair{17, 2}}) {
      Matrix Y = X;
      Y(i, j) = bad;
      CHECK_FALSE(all_finite(Y));
      CHECK(all_finite(Y) == Y.allFinite());
    }
  }
  Matrix Z = Matrix::Zero(4, 4);
  Z(1, 1) = -0.0;
  Z(2, 2) = std::numeric_limits<double>::denorm_min();
  CHECK(all_finite(Z));
}
