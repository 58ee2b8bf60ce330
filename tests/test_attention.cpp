// Logits, masked softmax and attention diagnostics (docs/science/model-spec.md section 1, steps 1-3).
#include <catch2/catch.hpp>

#include <cmath>

#include <vector>

#include "kernel/ops/attention.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/model/random.hpp"

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

namespace {
Matrix gaussian(RandomStream& rng, int r, int c, double std = 1.0) {
  Matrix A(r, c);
  rng.fill_normal(A, std);
  return A;
}
}  // namespace

TEST_CASE("mask row ranges: contiguous and lower-triangular masks are recognised", "[attention]") {
  const MaskRows complete = analyse_rows(complete_mask(5));
  CHECK(complete.contiguous);
  CHECK_FALSE(complete.lower_triangular);
  CHECK(complete.lo == std::vector<int>{0, 0, 0, 0, 0});
  CHECK(complete.hi == std::vector<int>{5, 5, 5, 5, 5});
  const MaskRows causal = analyse_rows(causal_mask(4));
  CHECK(causal.contiguous);
  CHECK(causal.lower_triangular);
  CHECK(causal.hi == std::vector<int>{1, 2, 3, 4});
  const MaskRows window = analyse_rows(sliding_window_mask(5, 1));
  CHECK(window.contiguous);
  CHECK_FALSE(window.lower_triangular);
  CHECK(window.lo == std::vector<int>{0, 0, 1, 2, 3});
  CHECK(window.hi == std::vector<int>{2, 3, 4, 5, 5});
  const MaskRows uni = analyse_rows(unidirectional_sliding_window_mask(5, 2));
  CHECK(uni.contiguous);
  CHECK(uni.lower_triangular);
  CHECK(uni.lo == std::vector<int>{0, 0, 0, 1, 2});
  MaskMatrix gaps = complete_mask(3);
  gaps(0, 1) = 0;  // row 0 attends to {0, 2}: two ranges
  CHECK_FALSE(analyse_rows(gaps).contiguous);
}

TEST_CASE("fast logits (folded, causal lower triangle) equal attention_logits", "[attention]") {
  RandomStream rng(5, 1);
  // (N, d, d_k): folded (d_k >= d, N > d), not folded (d_k < d; N < d), both masks.
  const int shapes[][3] = {{40, 8, 8}, {40, 8, 12}, {40, 8, 4}, {6, 20, 20}, {1, 3, 3}};
  for (const auto& sh : shapes) {
    const int n = sh[0], d = sh[1], dk = sh[2];
    const Matrix X = gaussian(rng, n, d), WQ = gaussian(rng, d, dk), WK = gaussian(rng, d, dk);
    Matrix Q, K, S;
    attention_logits(X, WQ, WK, 0.7, Q, K, S);
    const double tol = 1e-13 * S.cwiseAbs().maxCoeff();
    for (const bool lower : {false, true}) {
      INFO("N " << n << " d " << d << " d_k " << dk << " lower " << lower << " fold "
                << fold_logits(n, d, dk, lower));
      LogitsWorkspace ws;
      RowMajorMatrix F;
      attention_logits_fast(X, WQ, WK, 0.7, lower, ws, F);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < (lower ? i + 1 : n); ++j) CHECK(std::abs(F(i, j) - S(i, j)) <= tol);
    }
  }
  CHECK(fold_logits(128, 64, 64, false));   // 2 d^3 + 2 N d^2 < 4 N d^2
  CHECK_FALSE(fold_logits(32, 128, 128, false));  // d > N: two projections are cheaper
  CHECK_FALSE(fold_logits(128, 64, 32, false));   // d_k < d
}

TEST_CASE("softmax_rows equals masked_softmax and attention_stats", "[attention]") {
  RandomStream rng(9, 2);
  const int n = 9;
  // Scales: ordinary logits, and logits so large that some weights underflow to exactly 0
  // (min weight 0) or lie below exp(-708), where Eigen's vectorised exp would clamp.
  for (const double scale : {1.0, 30.0, 400.0}) {
    for (const MaskMatrix& mask : {complete_mask(n), causal_mask(n), sliding_window_mask(n, 2),
                                   unidirectional_sliding_window_mask(n, 3)}) {
      const Matrix S = gaussian(rng, n, n, scale);
      Matrix A = S;
      masked_softmax(A, mask);
      const AttentionStats ref = attention_stats(A, mask);
      const MaskRows rows = analyse_rows(mask);
      RowMajorMatrix F = S;
      RowVector buffer;
      const AttentionStats got = softmax_rows(F, rows, buffer);
      INFO("scale " << scale << " lower " << rows.lower_triangular);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          if (rows.lower_triangular && j > i) continue;  // left unspecified
          CHECK(std::abs(F(i, j) - A(i, j)) <= 1e-15 * std::max(1.0, A(i, j)) + 4e-16 * A(i, j) * scale);
          if (!mask(i, j)) CHECK(F(i, j) == 0.0);
        }
      CHECK_THAT(got.min_weight, WithinRel(ref.min_weight, 1e-12) || WithinAbs(ref.min_weight, 1e-300));
      // attention_stats' -sum a ln a loses the maximal entry's share -a_max ln a_max ~ r when
      // a_max = 1/(1 + r) rounds to 1 (r < 1e-16): an absolute error below 1e-16, which
      // softmax_rows does not make (see the next test).
      CHECK_THAT(got.mean_entropy, WithinRel(ref.mean_entropy, 1e-12) || WithinAbs(ref.mean_entropy, 1e-15));
    }
  }
}

TEST_CASE("entropy of a nearly one-hot row keeps its relative accuracy", "[attention]") {
  // Logits (0, -40): a = (1/(1+e^-40), e^-40/(1+e^-40)); H = log1p(e^-40) + 40 e^-40/(1+e^-40),
  // about 1.7e-16: a closed form ln Z - ... with Z rounded to 1 would lose it entirely.
  RowMajorMatrix S(2, 2);
  S << 0.0, -40.0, -40.0, 0.0;
  const MaskRows rows = analyse_rows(complete_mask(2));
  RowVector buffer;
  const AttentionStats got = softmax_rows(S, rows, buffer);
  const double t = std::exp(-40.0);
  const double h = std::log1p(t) + 40.0 * t / (1.0 + t);
  CHECK_THAT(got.mean_entropy, WithinRel(h, 1e-14));
  CHECK_THAT(got.min_weight, WithinRel(t / (1.0 + t), 1e-14));
}

TEST_CASE("attention_layer's fast path equals the general formulas", "[attention]") {
  // The general path written out: attention_logits, masked_softmax, sum over heads of A X W_V,
  // residual, LayerNorm; against attention_layer (row ranges, folding, triangular products).
  RandomStream rng(3, 4);
  const int n = 12, d = 6;
  const Normalization norm(NormType::layernorm, d);
  for (const MaskMatrix& mask : {complete_mask(n), causal_mask(n), sliding_window_mask(n, 2),
                                 unidirectional_sliding_window_mask(n, 3)}) {
    for (const int heads : {1, 2}) {
      for (const double alpha : {0.0, 0.5}) {
        for (const int dk : {d, 3}) {
          const Matrix X = gaussian(rng, n, d);
          LayerWeights w;
          for (int h = 0; h < heads; ++h) {
            w.q.push_back(gaussian(rng, d, dk));
            w.k.push_back(gaussian(rng, d, dk));
            w.v.push_back(gaussian(rng, d, d));
          }
          Matrix Y = Matrix::Zero(n, d), Q, K, S;
          double min_w = 1.0, entropy = 0.0;
          for (int h = 0; h < heads; ++h) {
            attention_logits(X, w.q[h], w.k[h], 2.0, Q, K, S);
            masked_softmax(S, mask);
            const AttentionStats st = attention_stats(S, mask);
            min_w = std::min(min_w, st.min_weight);
            entropy += st.mean_entropy / heads;
            Y += S * X * w.v[h];
          }
          if (alpha != 0.0) Y = X + alpha * Y;
          normalize_rows(Y, norm);
          const LayerParams p{&mask, 2.0, alpha, &norm};
          LayerWorkspace ws(n, d, dk);
          Matrix out(n, d);
          const LayerReport rep = attention_layer(X, w, p, ws, out);
          INFO("heads " << heads << " alpha " << alpha << " d_k " << dk);
          CHECK((out - Y).cwiseAbs().maxCoeff() <= 1e-12);
          CHECK_THAT(rep.attention.min_weight, WithinRel(min_w, 1e-12));
          CHECK_THAT(rep.attention.mean_entropy, WithinRel(entropy, 1e-12));
        }
      }
    }
  }
}

TEST_CASE("the fast path equals the general path the derivative passes cache (shaped, W_O, dropout)", "[attention]") {
  // attention_layer without a cache takes the fast path on range masks (row ranges, folded
  // W_Q W_K^T, triangular products); with a cache (kernel/ops/cache.hpp) the general path, whose
  // activations the adjoint and the tangent linearise at. The two must give the same layer.
  RandomStream rng(5, 6);
  const int n = 10, d = 6;
  const Normalization norm(NormType::layernorm, d);
  for (const MaskMatrix& mask : {complete_mask(n), causal_mask(n), sliding_window_mask(n, 2)}) {
    for (const int dk : {d, 3}) {
      for (const bool dropped : {false, true}) {
        const Matrix X = gaussian(rng, n, d);
        LayerWeights w;
        for (int h = 0; h < 2; ++h) {
          w.q.push_back(gaussian(rng, d, dk));
          w.k.push_back(gaussian(rng, d, dk));
          w.v.push_back(gaussian(rng, d, 4));
          w.o.push_back(gaussian(rng, 4, d));
        }
        LayerParams p{&mask, 2.0, 0.5, &norm};
        p.attention.shape = AttentionShape{0.8, 0.3, 0.2};
        RandomStream fast_rng(9, 1), general_rng(9, 1);
        const Dropout fast_drop{0.2, 0.1, &fast_rng}, general_drop{0.2, 0.1, &general_rng};
        LayerWorkspace ws(n, d, dk);
        Matrix fast(n, d), general(n, d);
        p.dropout = dropped ? &fast_drop : nullptr;
        attention_layer(X, w, p, ws, fast);
        LayerCacheT<double> cache;
        p.dropout = dropped ? &general_drop : nullptr;
        attention_layer(X, w, p, ws, general, &cache);
        INFO("d_k " << dk << (dropped ? " with dropout" : ""));
        CHECK((fast - general).cwiseAbs().maxCoeff() <= 1e-12);
        REQUIRE(cache.heads.size() == 2);
        CHECK(cache.heads[0].A.rowwise().sum().isApprox(Vector::Ones(n), 1e-14));  // the softmax before shaping
        CHECK(cache.heads[1].As.size() == n * n);
        CHECK((cache.heads[1].D.size() > 0) == dropped);
        CHECK((cache.D.size() > 0) == dropped);
      }
    }
  }
}
