// The attention statistics (kernel/block/attention_statistics.hpp, SCIENCE.md section 8): the largest
// weight, the sink weight, the sink rate and the column sums, worked by hand and as properties, on
// the reference platform's matrix and the cpu platform's streaming pass (no N x N matrix); the
// platforms against the reference at N = 700 and 2048 are settings of the conformance body
// (tests/test_platform_conformance.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "platform_support.hpp"
#include "kernel/block/attention_statistics.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/measures/measure_registry.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/platform/fused_attention.hpp"

using namespace rcsim;
using rcsim::test::gaussian_weights;

namespace {

// One layer's statistics on the reference platform (attention_layer, fused = false) and on the cpu
// platform (fused_attention), for the same X and weights.
template <class T>
AttentionStats statistics_on_reference(const MatrixT<T>& X, const LayerWeightsT<T>& w, const MaskMatrix& mask,
                                    double d_qk) {
  const Normalization none;
  LayerParams p{&mask, d_qk, 0.0, &none};
  p.attention_statistics = true;
  LayerWorkspaceT<T> ws(static_cast<int>(X.rows()), static_cast<int>(X.cols()), static_cast<int>(X.cols()));
  MatrixT<T> next;
  return attention_layer(X, w, p, ws, next).attention;
}

}  // namespace

TEST_CASE("attention statistics: two tokens worked by hand", "[attention_statistics]") {
  // X = (1, 2)^T, W_Q = W_K = W_V = 1, d_QK = 1: S = [[1, 2], [2, 4]]; complete mask:
  // row 0 = (1, e) / (1 + e), row 1 = (1, e^2) / (1 + e^2).
  Matrix X(2, 1);
  X << 1, 2;
  LayerWeights w;
  w.q = w.k = w.v = {Matrix::Identity(1, 1)};
  const double e = std::exp(1.0), e2 = std::exp(2.0);
  const double a00 = 1 / (1 + e), a10 = 1 / (1 + e2);
  const MaskMatrix mask = complete_mask(2);
  Matrix Y;
  const AttentionStats fused = fused_attention(X, w, 1.0, analyse_rows(mask), 1, true, Y);
  const AttentionStats ref = statistics_on_reference<double>(X, w, mask, 1.0);
  for (const AttentionStats& s : {fused, ref}) {
    CHECK(s.mean_max_weight == Approx((e / (1 + e) + e2 / (1 + e2)) / 2).epsilon(1e-15));
    CHECK(s.mean_sink_weight == Approx((a00 + a10) / 2).epsilon(1e-15));
    CHECK(s.sink_rate == 0.0);  // (0.269 + 0.119) / 2 = 0.194 < 0.3
    REQUIRE(s.received.size() == 2);
    CHECK(s.received(0) == Approx(a00 + a10).epsilon(1e-15));
    CHECK(s.received(1) == Approx(2 - a00 - a10).epsilon(1e-15));
  }
}

TEST_CASE("attention statistics: uniform attention under each mask", "[attention_statistics]") {
  // W_Q = 0: every logit 0, each row uniform over its allowed keys. Causal, N = 3: rows 1, 1/2, 1/3
  // on token 1; largest weights the same; column sums 1 + 1/2 + 1/3, 1/2 + 1/3, 1/3.
  const int n = 3;
  Matrix X(n, 2);
  X << 1, 0, 0, 1, 1, 1;
  LayerWeights w;
  w.q = {Matrix::Zero(2, 2)};
  w.k = w.v = {Matrix::Identity(2, 2)};
  Matrix Y;
  for (const bool fused : {false, true}) {
    const MaskMatrix causal = causal_mask(n);
    const AttentionStats c =
        fused ? fused_attention(X, w, 1.0, analyse_rows(causal), 1, true, Y) : statistics_on_reference<double>(X, w, causal, 1.0);
    CHECK(c.mean_max_weight == Approx(11.0 / 18.0).epsilon(1e-15));
    CHECK(c.mean_sink_weight == Approx(11.0 / 18.0).epsilon(1e-15));
    CHECK(c.sink_rate == 1.0);
    CHECK(c.received(0) == Approx(11.0 / 6.0).epsilon(1e-15));
    CHECK(c.received(1) == Approx(5.0 / 6.0).epsilon(1e-15));
    CHECK(c.received(2) == Approx(1.0 / 3.0).epsilon(1e-15));
    // Complete: 1/3 everywhere, a sink head by the threshold (1/3 > 0.3); every column receives 1.
    const MaskMatrix complete = complete_mask(n);
    const AttentionStats u = fused ? fused_attention(X, w, 1.0, analyse_rows(complete), 1, true, Y)
                                   : statistics_on_reference<double>(X, w, complete, 1.0);
    CHECK(u.mean_sink_weight == Approx(1.0 / 3.0).epsilon(1e-15));
    CHECK(u.sink_rate == 1.0);
    CHECK(u.received.isApprox(Vector::Ones(n), 1e-15));
    // A sliding window of radius 1 on 5 tokens: rows 0 and 4 see 2 keys, the others 3; only
    // rows 0 and 1 see token 1: sink (1/2 + 1/3) / 5 = 1/6, no sink head.
    Matrix X5(5, 2);
    X5 << 1, 0, 0, 1, 1, 1, 2, 0, 0, 2;
    const MaskMatrix window = sliding_window_mask(5, 1);
    const AttentionStats s = fused ? fused_attention(X5, w, 1.0, analyse_rows(window), 1, true, Y)
                                   : statistics_on_reference<double>(X5, w, window, 1.0);
    CHECK(s.mean_sink_weight == Approx(1.0 / 6.0).epsilon(1e-15));
    CHECK(s.sink_rate == 0.0);
    CHECK(s.mean_max_weight == Approx((0.5 + 3 * (1.0 / 3.0) + 0.5) / 5).epsilon(1e-15));
    CHECK(s.received(0) == Approx(0.5 + 1.0 / 3.0).epsilon(1e-15));
    CHECK(s.received(2) == Approx(1.0).epsilon(1e-15));
  }
}

TEST_CASE("attention statistics: the sink rate counts the heads above the threshold", "[attention_statistics]") {
  // Three heads on N = 4 tokens, X = I: head 0 uniform (sink 1/4, below 0.3); head 1 with
  // W_Q W_K^T putting logit 10 on key 1 for every query (a sink head); head 2 uniform again.
  const int n = 4;
  const Matrix X = Matrix::Identity(n, n);
  LayerWeights w;
  Matrix sink = Matrix::Zero(n, n);
  sink.col(0).setConstant(10.0);  // S = X W_Q (X W_K)^T = W_Q W_K^T with W_K = I: S_i1 = 10
  w.q = {Matrix::Zero(n, n), sink, Matrix::Zero(n, n)};
  w.k = w.v = {Matrix::Identity(n, n), Matrix::Identity(n, n), Matrix::Identity(n, n)};
  const double a = std::exp(10.0) / (std::exp(10.0) + 3.0);  // head 1's weight on token 1
  Matrix Y;
  const MaskMatrix mask = complete_mask(n);
  for (const AttentionStats& s : {fused_attention(X, w, 1.0, analyse_rows(mask), 1, true, Y),
                                  statistics_on_reference<double>(X, w, mask, 1.0)}) {
    CHECK(s.sink_rate == Approx(1.0 / 3.0).epsilon(1e-15));
    CHECK(s.mean_sink_weight == Approx((0.25 + a + 0.25) / 3).epsilon(1e-14));
    CHECK(s.received.sum() == Approx(n).epsilon(1e-14));  // rows sum to 1: the columns sum to N
  }
}

TEST_CASE("attention statistics on the cpu platform do not depend on the thread count", "[attention_statistics]") {
  const int n = 1500, d = 4;
  RandomStream rng(3, 1);
  Matrix X(n, d);
  rng.fill_normal(X);
  const LayerWeights w = gaussian_weights(d, 2, 0, rng);
  const MaskRows rows = analyse_rows(causal_mask(n));
  Matrix Y1, Y;
  const AttentionStats s1 = fused_attention(X, w, 1.0, rows, 1, true, Y1);
  for (const int threads : {2, 3, 7}) {
    const AttentionStats s = fused_attention(X, w, 1.0, rows, threads, true, Y);
    CHECK(Y == Y1);
    CHECK(s.mean_max_weight == s1.mean_max_weight);
    CHECK(s.mean_sink_weight == s1.mean_sink_weight);
    CHECK(s.received == s1.received);  // bitwise
  }
  // The statistics do not change the layer's output.
  Matrix Y0;
  fused_attention(X, w, 1.0, rows, 2, false, Y0);
  CHECK(Y0 == Y1);
}
