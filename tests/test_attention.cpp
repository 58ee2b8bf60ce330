// Logits, masked softmax and attention diagnostics (SCIENCE.md section 1, steps 1-3).
#include <catch2/catch.hpp>

#include <cmath>

#include "attention.hpp"
#include "mask.hpp"
#include "random.hpp"

using namespace rcsim;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

TEST_CASE("softmax of a 2 x 2 case worked by hand", "[attention]") {
  // Row 0 logits (0, ln 3): weights (1/4, 3/4). Row 1 causal-masked: only itself.
  Matrix S(2, 2);
  S << 0.0, std::log(3.0), 5.0, -7.0;
  SECTION("complete") {
    Matrix A = S;
    masked_softmax(A, complete_mask(2));
    CHECK_THAT(A(0, 0), WithinRel(0.25, 1e-15));
    CHECK_THAT(A(0, 1), WithinRel(0.75, 1e-15));
    CHECK_THAT(A(1, 0), WithinRel(1.0 / (1.0 + std::exp(-12.0)), 1e-15));
  }
  SECTION("causal: token 0 attends only to itself, masked weight exactly 0") {
    Matrix A = S;
    masked_softmax(A, causal_mask(2));
    CHECK(A(0, 0) == 1.0);
    CHECK(A(0, 1) == 0.0);
    CHECK_THAT(A(1, 0), WithinRel(1.0 / (1.0 + std::exp(-12.0)), 1e-15));
  }
}

TEST_CASE("logits worked by hand", "[attention]") {
  // X = [[1, 0], [0, 2]], W_Q = W_K = I, d_QK = 4: S = X X^T / 2.
  Matrix X(2, 2), I = Matrix::Identity(2, 2), Q, K, S;
  X << 1, 0, 0, 2;
  attention_logits(X, I, I, 4.0, Q, K, S);
  CHECK(S(0, 0) == 0.5);
  CHECK(S(1, 1) == 2.0);
  CHECK(S(0, 1) == 0.0);
  SECTION("temperature 1/64 multiplies the logits by 8") {
    attention_logits(X, I, I, 1.0 / 64.0, Q, K, S);
    CHECK(S(1, 1) == 32.0);
  }
}

TEST_CASE("attention rows sum to 1 and masked weights are exactly 0", "[attention]") {
  const int n = GENERATE(1, 2, 7, 20);
  const int kind = GENERATE(0, 1, 2, 3);
  const MaskMatrix mask = kind == 0 ? complete_mask(n)
                          : kind == 1 ? causal_mask(n)
                          : kind == 2 ? sliding_window_mask(n, 2)
                                      : unidirectional_sliding_window_mask(n, 3);
  RandomStream rng(7, static_cast<std::uint64_t>(n * 10 + kind));
  Matrix S(n, n);
  rng.fill_normal(S, 30.0);  // large logits: stress the max subtraction
  masked_softmax(S, mask);
  for (int i = 0; i < n; ++i) {
    CHECK_THAT(S.row(i).sum(), WithinAbs(1.0, 1e-14));
    for (int j = 0; j < n; ++j) {
      if (!mask(i, j)) CHECK(S(i, j) == 0.0);
      CHECK(S(i, j) >= 0.0);
    }
  }
}

TEST_CASE("huge logits do not overflow (log-sum-exp)", "[attention]") {
  Matrix S = Matrix::Zero(3, 3);
  S.row(0) << 1000.0, 999.0, -1000.0;
  masked_softmax(S, complete_mask(3));
  CHECK(S.allFinite());
  CHECK_THAT(S(0, 0), WithinRel(1.0 / (1.0 + std::exp(-1.0)), 1e-14));
}

TEST_CASE("zero W_Q, W_K give uniform attention over the allowed set", "[attention]") {
  const int n = 5;
  Matrix X(n, 3), Q, K, S;
  RandomStream rng(1, 0);
  rng.fill_normal(X);
  const Matrix Z = Matrix::Zero(3, 3);
  attention_logits(X, Z, Z, 1.0, Q, K, S);
  masked_softmax(S, causal_mask(n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) CHECK_THAT(S(i, j), WithinRel(1.0 / (i + 1), 1e-15));
}

TEST_CASE("attention diagnostics worked by hand", "[attention]") {
  Matrix A(2, 2);
  A << 0.25, 0.75, 1.0, 0.0;
  const AttentionStats s = attention_stats(A, causal_mask(2));
  // Allowed entries: (0,0) = 0.25, (1,0) = 1, (1,1) = 0; the masked (0,1) is ignored.
  CHECK(s.min_weight == 0.0);
  const double h0 = -0.25 * std::log(0.25);  // row 0: only (0, 0) is allowed
  CHECK_THAT(s.mean_entropy, WithinRel(h0 / 2.0, 1e-15));
  const AttentionStats u = attention_stats(Matrix::Constant(4, 4, 0.25), complete_mask(4));
  CHECK(u.min_weight == 0.25);
  CHECK_THAT(u.mean_entropy, WithinRel(std::log(4.0), 1e-15));
}
