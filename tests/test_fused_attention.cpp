// The cpu platform's fused attention (kernel/platform/fused_attention.hpp, docs/dev/platforms.md) against a
// case worked by hand and against the reference platform (layer.cpp's N x N attention matrix).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "platform_support.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/platform/fused_attention.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/trial/platform_table.hpp"
#include "kernel/model/random.hpp"

using namespace rcsim;
using rcsim::test::gaussian_weights;
using rcsim::test::rel_max;

namespace {



struct Case {
  std::string name;
  MaskMatrix mask;
};

std::vector<Case> masks(int n) {
  return {{"complete", complete_mask(n)},
          {"causal", causal_mask(n)},
          {"sliding window 7", sliding_window_mask(n, 7)},
          {"uni-directional window 40", unidirectional_sliding_window_mask(n, 40)}};
}

}  // namespace

TEST_CASE("the cpu platform's exponential within 4.5e-16 of std::exp on [-708, 0]", "[fused]") {
  CHECK(exp_nonpositive(0.0) == 1.0);  // exactly: a row's maximum has weight e^0 = 1
  double worst = 0.0;
  int points = 0;
  for (double x = -708.0; x <= 0.0; x += 0.0007331, ++points) {
    const double want = std::exp(x);
    worst = std::max(worst, std::abs(exp_nonpositive(x) - want) / want);
  }
  for (const double x : {-1e-300, -1e-17, -0.34657359027997264, -0.34657359027997265, -1.0, -707.9999})
    worst = std::max(worst, std::abs(exp_nonpositive(x) - std::exp(x)) / std::exp(x));
  INFO(points << " points, worst relative error " << worst);
  CHECK(worst <= 4.5e-16);
}

TEST_CASE("fused attention: three tokens worked by hand", "[fused]") {
  // X rows (1, 0), (0, 1), (1, 1); W_Q = W_K = W_V = I, d_QK = 1: S = X X^T, Y = softmax(S) X.
  Matrix X(3, 2);
  X << 1, 0, 0, 1, 1, 1;
  LayerWeights w;
  w.q = w.k = w.v = {Matrix::Identity(2, 2)};
  const double e = std::exp(1.0), e2 = std::exp(2.0);
  // Row 2 (complete): logits (1, 1, 2): weights (e, e, e^2) / (2e + e^2); y = (e + e^2, e + e^2) / (2e + e^2).
  const double y2 = (e + e2) / (2 * e + e2);
  // Row 1 (causal): logits (0, 1): weights (1, e) / (1 + e); y = (1, e) / (1 + e).
  Matrix Y;
  const AttentionStats s = fused_attention(X, w, 1.0, analyse_rows(complete_mask(3)), 1, false, Y);
  CHECK(std::abs(Y(2, 0) - y2) < 1e-15);
  CHECK(std::abs(Y(2, 1) - y2) < 1e-15);
  // Row 0: logits (1, 0, 1): weights (e, 1, e) / (2e + 1); the smallest weight of all rows is 1 / (2e + 1).
  CHECK(std::abs(s.min_weight - 1.0 / (2 * e + 1)) < 1e-15);
  fused_attention(X, w, 1.0, analyse_rows(causal_mask(3)), 1, false, Y);
  CHECK(Y.row(0) == X.row(0));  // token 0 attends only to itself: exactly x_0
  CHECK(std::abs(Y(1, 0) - 1.0 / (1 + e)) < 1e-15);
  CHECK(std::abs(Y(1, 1) - e / (1 + e)) < 1e-15);
}

TEST_CASE("fused attention equals the reference layer on every range mask", "[fused]") {
  // N = 300 (blocks of 64 rows) and 1100 (blocks of 29): rows split across blocks and block edges
  // inside the masks' ranges. Heads 1 and 3, with and without W_O; float64 within 1e-12.
  for (const int n : {300, 1100}) {
    RandomStream rng(7, static_cast<std::uint64_t>(n));
    const int d = 8;
    Matrix X(n, d);
    rng.fill_normal(X);
    for (const auto& [heads, value_dim] : std::vector<std::pair<int, int>>{{1, 0}, {3, 0}, {2, 5}}) {
      const LayerWeights w = gaussian_weights(d, heads, value_dim, rng);
      for (const Case& c : masks(n)) {
        INFO(c.name << ", N = " << n << ", heads " << heads << ", value_dim " << value_dim);
        const Normalization sphere(NormType::sphere, d);
        LayerParams p{&c.mask, 2.0, 0.5, &sphere};  // residual alpha 0.5, then the sphere
        LayerWorkspace ws_ref(n, d, d), ws_fused(n, d, d);
        Matrix ref, fused;
        const LayerReport a = attention_layer(X, w, p, ws_ref, ref);
        p.kernel = &cpu_attention_kernel();
        p.threads = 2;
        REQUIRE(kernel_applies(cpu_attention_kernel(), p, false, analyse_rows(c.mask)));
        const LayerReport b = attention_layer(X, w, p, ws_fused, fused);
        CHECK(rel_max(fused, ref) < 1e-12);
        CHECK(std::abs(b.attention.min_weight - a.attention.min_weight) <= 1e-12 * a.attention.min_weight);
        CHECK(std::abs(b.attention.mean_entropy - a.attention.mean_entropy) <= 1e-12 * a.attention.mean_entropy);
        CHECK(ws_fused.S_rows.size() == 0);  // no N x N matrix was formed
      }
    }
  }
}

TEST_CASE("fused attention in float32 within 1e-5 of the reference", "[fused]") {
  const int n = 700, d = 6;
  RandomStream rng(11, 0);
  Matrix X(n, d);
  rng.fill_normal(X);
  LayerWeightsT<float> w;
  cast_weights(gaussian_weights(d, 2, 0, rng), w);
  const MatrixF Xf = X.cast<float>();
  for (const Case& c : masks(n)) {
    INFO(c.name);
    const Normalization none;
    LayerParams p{&c.mask, 1.0, 0.0, &none};
    LayerWorkspaceT<float> ws_ref(n, d, d), ws_fused(n, d, d);
    MatrixF ref, fused;
    attention_layer(Xf, w, p, ws_ref, ref);
    p.kernel = &cpu_attention_kernel();
    attention_layer(Xf, w, p, ws_fused, fused);
    CHECK(rel_max(fused.cast<double>(), ref.cast<double>()) < 1e-5);
  }
}

TEST_CASE("fused attention does not depend on the thread count", "[fused]") {
  const int n = 530, d = 3;
  RandomStream rng(3, 0);
  Matrix X(n, d);
  rng.fill_normal(X);
  const LayerWeights w = gaussian_weights(d, 2, 0, rng);
  const MaskRows rows = analyse_rows(causal_mask(n));
  Matrix Y1, Y;
  const AttentionStats s1 = fused_attention(X, w, 1.0, rows, 1, false, Y1);
  for (const int threads : {2, 3, 8}) {
    const AttentionStats s = fused_attention(X, w, 1.0, rows, threads, false, Y);
    CHECK(Y == Y1);  // bitwise
    CHECK(s.min_weight == s1.min_weight);
    CHECK(s.mean_entropy == s1.mean_entropy);
  }
}

TEST_CASE("the particle flow step (RK4, tangent, sphere) on the cpu platform equals the reference", "[fused]") {
  // Geshkovski et al.'s flow with Q = K = V = I, beta = 4 (d_QK = 1/16), dt = 0.1, ten steps.
  const int n = 600, d = 3;
  RandomStream rng(5, 0);
  Matrix X(n, d);
  rng.fill_normal(X);
  const Normalization sphere(NormType::sphere, d);
  normalize_rows(X, sphere);
  LayerWeights w;
  w.q = w.k = w.v = {Matrix::Identity(d, d)};
  for (const MaskMatrix& mask : {complete_mask(n), causal_mask(n)}) {
    LayerParams p{&mask, 1.0 / 16.0, 0.1, &sphere};
    p.integrator = Integrator::rk4;
    p.project = ResidualProject::tangent;
    LayerParams q = p;
    q.kernel = &cpu_attention_kernel();
    q.threads = 2;
    LayerWorkspace ws_ref(n, d, d), ws_fused(n, d, d);
    Matrix ref = X, fused = X, next;
    for (int step = 0; step < 10; ++step) {
      attention_layer(ref, w, p, ws_ref, next);
      ref.swap(next);
      attention_layer(fused, w, q, ws_fused, next);
      fused.swap(next);
    }
    CHECK(rel_max(fused, ref) < 1e-12);
    CHECK(ws_fused.S_rows.size() == 0);
  }
}

TEST_CASE("what the fused attention does not cover goes to the reference", "[fused]") {
  const MaskMatrix mask = complete_mask(4);
  const MaskRows rows = analyse_rows(mask);
  const Normalization none;
  LayerParams p{&mask, 1.0, 0.0, &none};
  CHECK(kernel_applies(cpu_attention_kernel(), p, false, rows));
  CHECK_FALSE(kernel_applies(cpu_attention_kernel(), p, true, rows));  // projection biases
  LayerParams u = p;
  u.attention.kind = AttentionKind::usa;
  CHECK_FALSE(kernel_applies(cpu_attention_kernel(), u, false, rows));
  LayerParams k = p;
  k.keep_attention = true;  // an attention measure needs the matrix
  CHECK_FALSE(kernel_applies(cpu_attention_kernel(), k, false, rows));
  LayerParams h = p;
  h.attention.kind = AttentionKind::hardmax;
  CHECK_FALSE(kernel_applies(cpu_attention_kernel(), h, false, rows));
  MaskMatrix two_ranges = complete_mask(4);
  two_ranges(0, 2) = 0;  // row 0: {0, 1} and {3}
  CHECK_FALSE(kernel_applies(cpu_attention_kernel(), p, false, analyse_rows(two_ranges)));
}

TEST_CASE("run.platform auto picks the platform that covers the run and cpu refuses the rest", "[fused]") {
  ModelSpec c;
  c.model.tokens = kCpuPlatformFromTokens - 1;
  CHECK(resolved_platform(c) == Platform::reference);
  c.model.tokens = kCpuPlatformFromTokens;
  CHECK(resolved_platform(c) == Platform::cpu);
  c.run.platform = Platform::reference;
  CHECK(resolved_platform(c) == Platform::reference);
  c.run.platform = Platform::cpu;
  c.model.tokens = 8;
  CHECK(resolved_platform(c) == Platform::cpu);
  c.attention.kind = AttentionKind::usa;
  CHECK_THROWS_WITH(resolved_platform(c), Catch::Contains("run.platform") && Catch::Contains("attention.kind"));
  c.attention.kind = AttentionKind::softmax;
  // The unit-speed step needs the N x N weights (kernel/block/layer.cpp: its field is summed as differences);
  // the cpu platform keeps no dense mask, so it must refuse it rather than fall back to the matrix.
  c.dynamics_speed = DynamicsSpeed::unit;
  CHECK_THROWS_WITH(resolved_platform(c), Catch::Contains("run.platform") && Catch::Contains("dynamics.speed = unit"));
  c.run.platform = Platform::automatic;
  c.model.tokens = 4096;
  CHECK(resolved_platform(c) == Platform::reference);
  c.dynamics_speed = DynamicsSpeed::field;
  c.attention.kind = AttentionKind::usa;
  c.model.tokens = 4096;
  CHECK(resolved_platform(c) == Platform::reference);  // auto: the platform that covers it
  c.attention.kind = AttentionKind::softmax;
  c.output.attention = true;
  CHECK(resolved_platform(c) == Platform::reference);
  // Threads inside a trial: what is left when every trial in flight has one.
  c.run.threads = 8;
  c.run.trials = 1;
  CHECK(threads_per_trial(c) == 8);
  c.run.trials = 3;
  CHECK(threads_per_trial(c) == 2);
  c.run.trials = 100;
  CHECK(threads_per_trial(c) == 1);
}
