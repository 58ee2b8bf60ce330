// What is specific to the cpu platform's fused attention (kernel/platform/fused_attention.hpp,
// docs/dev/platforms.md): its exponential, the independence of the thread count, what the layer
// leaves to the reference, the choice of run.platform = auto. Its agreement with the reference
// (and the case worked by hand) is the conformance body of every platform entry
// (tests/test_platform_conformance.cpp).
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
  for (const PlatformEntry& e : platform_table()) CHECK(&platform_entry(e.platform) == &e);
}
