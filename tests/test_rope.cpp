// attention.rope (rotary position embedding, llama2.c's adjacent pairs; kernel/ops/rotary.hpp):
// a 2-token case worked by hand, the rotation's transpose by the dot-product test, the block's
// adjoint and tangent against finite differences, and the refusal of the fast and fused paths
// through AttentionSettings::needs_general_path. Issue 34's example of the cost of a new attention
// variant (docs/dev/kernel.md).
#include "backward_support.hpp"

#include "config/config.hpp"
#include "kernel/platform/fused_attention.hpp"
#include "kernel/ops/rotary.hpp"
#include "kernel/model/mask_ranges.hpp"
#include "kernel/trial/platform_table.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

TEST_CASE("rope: two tokens by hand, the transpose undoes the rotation and is its adjoint", "[variants][rope]") {
  // Token 0 (position 0) stays; token 1 (position 1) turns by 1 rad in the pair (0, 1), by theta^(-1/2)
  // rad in the pair (2, 3) (head size 4, theta = 100: 0.1 rad).
  Matrix X(2, 4);
  X << 1, 0, 0, 2, 1, 0, 0, 2;
  Matrix R = X;
  apply_rotary<double>(R, 4, 0, 100.0);
  Matrix expected(2, 4);
  expected << 1, 0, 0, 2, std::cos(1.0), std::sin(1.0), -2 * std::sin(0.1), 2 * std::cos(0.1);
  CHECK((R - expected).cwiseAbs().maxCoeff() < 1e-15);
  // The block's attention on these tokens (W_Q = W_K = W_V = I, d_QK = 1, one head, no residual):
  // S = [[1, cos 1], [cos 1, 1]] for the first pair, plus the second pair's 4 and 4 cos 0.1.
  Case k;
  k.N = 2, k.d = 4, k.dk = 4, k.H = 1, k.alpha = 0.0, k.d_qk = 1.0;
  k.pos = NormPosition::post, k.norm = NormType::none, k.norms_from_file = false;
  Fixture f(k, backward_test_mask("complete", 2));
  LayerWeights w;
  for (auto* m : {&w.q, &w.k, &w.v}) m->push_back(Matrix::Identity(4, 4));
  BlockParams p = f.p;
  p.layer.attention.rope = true;
  p.layer.attention.rope_theta = 100.0;
  p.layer.keep_attention = true;
  BlockWorkspace ws(2, 4, 4);
  Matrix Y;
  transformer_block(X, w, p, ws, Y);
  const double s01 = std::cos(1.0) + 4 * std::cos(0.1), s00 = 5.0;
  const double a01 = std::exp(s01) / (std::exp(s00) + std::exp(s01));
  CHECK(std::abs(ws.layer.attention_mean(0, 1) - a01) < 1e-14);
  CHECK(std::abs(ws.layer.attention_mean(1, 0) - a01) < 1e-14);
  // Transpose: undoes the rotation, and <R U, V> = <U, R^T V> (two heads of 4, from position 3).
  RandomStream rng(5, 0);
  const Matrix U = gaussian(5, 8, rng), V = gaussian(5, 8, rng);
  Matrix RU = U, RtV = V, back = U;
  apply_rotary<double>(RU, 4, 3, 10000.0);
  apply_rotary_transpose<double>(RtV, 4, 3, 10000.0);
  apply_rotary<double>(back, 4, 3, 10000.0);
  apply_rotary_transpose<double>(back, 4, 3, 10000.0);
  CHECK((back - U).cwiseAbs().maxCoeff() < 1e-14);
  CHECK(std::abs(RU.cwiseProduct(V).sum() - U.cwiseProduct(RtV).sum()) < 1e-13 * U.norm() * V.norm());
  CHECK((RU - U).norm() > 0.1);  // not trivially so
}

TEST_CASE("rope: adjoint and tangent of the block against finite differences, dot-product test",
          "[variants][rope][backward][forward_mode]") {
  double worst = 0.0;
  int seed = 0;
  for (const bool qk_norm : {false, true}) {
    for (const char* mask : {"complete", "causal"}) {
      Case k;
      k.dk = 4;  // pairs
      k.m = qk_norm ? 0 : 4;
      k.qk_norm = qk_norm;
      INFO("qk_norm " << qk_norm << " " << mask);
      RandomStream rng(60 + static_cast<std::uint64_t>(seed++), 0);
      Fixture f(k, backward_test_mask(mask, k.N));
      f.p.layer.attention.rope = true;
      f.p.layer.attention.rope_theta = 3.0;  // angles of order 1 at these few positions
      LayerWeights w = random_weights(k, rng);
      Matrix X = gaussian(k.N, k.d, rng);
      const Matrix C = gaussian(k.N, k.d, rng), V = gaussian(k.N, k.d, rng);
      const BlockDerivativeCheck r = check_block_derivatives(k, X, w, f.p, C, V);
      const BlockGrads& g = r.grads;
      const double ex = r.dX, eq = r.dW_Q, ej = r.jvp;
      INFO("dX " << ex << " dW_Q " << eq << " JVP " << ej << " dot " << r.dot);
      CHECK(ex < kTol);
      CHECK(eq < kTol);
      CHECK(ej < 1e-7);
      CHECK(r.dot < 1e-12);
      BlockParams plain = f.p;  // the adjoint without the rotation must miss
      plain.layer.attention.rope = false;
      BlockGrads gp;
      block_backward(X, w, plain, C, gp);
      CHECK(rel_err(gp.dq[0], g.dq[0]) > 1e-2);
      worst = std::max({worst, ex, eq, ej});
    }
  }
  WARN("rope: worst relative error against FD " << worst);
}

TEST_CASE("rope: the general path only (fast and fused paths refuse it), keys and their checks", "[variants][rope]") {
  const MaskMatrix mask = causal_mask(4);
  const Normalization none;
  LayerParams p{&mask, 1.0, 0.0, &none};
  CHECK(kernel_applies(cpu_attention_kernel(), p, false, analyse_rows(mask)));
  p.attention.rope = true;
  CHECK(p.attention.needs_general_path());
  CHECK_FALSE(kernel_applies(cpu_attention_kernel(), p, false, analyse_rows(mask)));
  const Config c = make_config({{"attention.rope", "true"}, {"attention.rope_theta", "500"}, {"model.tokens", "300"}});
  CHECK(c.attention.rope);
  CHECK(c.attention.rope_theta == 500.0);
  CHECK(cpu_platform_refusal(c) == "attention.rope = true");
  CHECK(resolved_platform(c) == Platform::reference);  // auto never picks the cpu platform for it
  CHECK_THROWS_WITH(make_config({{"attention.rope", "true"}, {"model.key_dim", "3"}}),
                    Catch::Contains("attention.rope") && Catch::Contains("even model.key_dim"));
  CHECK_THROWS_WITH(make_config({{"attention.rope_theta", "0"}}), Catch::Contains("attention.rope_theta"));
  CHECK(make_config({{"model.layers", "4"}, {"model.layer_overrides", "0-1:attention.rope=true"}})
            .layer_overrides.at(0).spec->attention.rope);
}
