// attention.logit_softcap (Gemma 2's logit soft-capping, kernel/ops/logit_softcap.hpp): the forward
// against the formula written out, the bound it puts on the weights, and its adjoint and tangent
// through whole blocks against finite differences and each other. Issue 34's example of the cost
// of a new attention variant.
#include "backward_support.hpp"

#include "kernel/ops/logit_softcap.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

TEST_CASE("logit soft-capping: A = softmax(c tanh(S / c)) written out, and weights bounded below",
          "[variants][softcap]") {
  Case k;
  k.H = 1;
  k.alpha = 0.0;
  k.pos = NormPosition::post;
  k.norm = NormType::none;
  k.norms_from_file = false;
  RandomStream rng(3, 0);
  Fixture f(k, backward_test_mask("causal", k.N));
  LayerWeights w = random_weights(k, rng);
  w.q[0] *= 30.0;  // logits of order 100: without the cap the rows are one-hot
  const Matrix X = gaussian(k.N, k.d, rng);
  const double cap = 2.0;
  Matrix Q, K, S;
  attention_logits(X, w.q[0], w.k[0], k.d_qk, Q, K, S);
  const Matrix raw = S;
  Matrix expected = S.unaryExpr([cap](double s) { return cap * std::tanh(s / cap); });
  masked_softmax(expected, f.mask);
  BlockParams p = f.p;
  p.layer.attention.logit_softcap = cap;
  p.layer.keep_attention = true;
  BlockWorkspace ws(k.N, k.d, k.dk);
  Matrix Y;
  transformer_block(X, w, p, ws, Y);
  const Matrix& A = ws.layer.attention_mean;  // one head
  CHECK((A - expected).cwiseAbs().maxCoeff() < 1e-14);
  CHECK(raw.cwiseAbs().maxCoeff() > 50.0);
  for (int i = 0; i < k.N; ++i)  // |S_c| < c: every allowed weight >= exp(-2c) / |N_i|
    for (int j = 0; j <= i; ++j) CHECK(A(i, j) >= std::exp(-2 * cap) / (i + 1));
  // A cap far above the logits: c tanh(s / c) = s - s^3 / (3 c^2) + O(s^5 / c^4), checked at the largest logit.
  Matrix capped = raw;
  const double big = 1e3;
  softcap_logits<double>(capped, big);
  Eigen::Index i0 = 0, j0 = 0;
  raw.cwiseAbs().maxCoeff(&i0, &j0);
  const double s0 = raw(i0, j0);
  CHECK_THAT(raw(i0, j0) - capped(i0, j0), Catch::Matchers::WithinRel(s0 * s0 * s0 / (3 * big * big), 0.02));
}

TEST_CASE("logit soft-capping: adjoint and tangent against finite differences, dot-product test",
          "[variants][softcap][backward][forward_mode]") {
  double worst = 0.0;
  int seed = 0;
  for (const NormPosition pos : {NormPosition::post, NormPosition::pre}) {
    for (const char* mask : {"complete", "causal"}) {
      Case k;
      k.pos = pos;
      k.m = pos == NormPosition::pre ? 4 : 0;
      k.attn_bias = pos == NormPosition::post;
      INFO(pos_name(pos) << " " << mask);
      RandomStream rng(40 + static_cast<std::uint64_t>(seed++), 0);
      Fixture f(k, backward_test_mask(mask, k.N));
      f.p.layer.attention.logit_softcap = 0.8;  // of the order of the logits: tanh far from linear
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
      // The adjoint without the cap's derivative (the plain block's) must miss.
      BlockParams plain = f.p;
      plain.layer.attention.logit_softcap = 0.0;
      BlockGrads gp;
      block_backward(X, w, plain, C, gp);
      CHECK(rel_err(gp.dq[0], g.dq[0]) > 1e-2);
      worst = std::max({worst, ex, eq, ej});
    }
  }
  WARN("logit soft-capping: worst relative error against FD " << worst);
}
