// attention.kind = softpick (Zuhri, Fuadi, Aji 2025, arXiv 2504.20966; kernel/ops/attention_weights.cpp):
//   A_ij = ReLU(e^{s_ij} - 1) / (sum_k |e^{s_ik} - 1| + eps)   over the allowed k,
// computed as the paper's code does, shifted by the row maximum m:
//   A_ij = ReLU(e^{s_ij - m} - e^{-m}) / (sum_k |e^{s_ik - m} - e^{-m}| + eps),  eps = 1e-8.
// Rows worked by hand, the map's properties (no sink: a row of logits <= 0 gets weight 0), its adjoint
// and tangent against finite differences and each other, through whole blocks too, and the science
// check: a dormant head whose softmax sinks on the first token has no sink under softpick.
#include "backward_support.hpp"

#include <cmath>
#include <limits>

#include "kernel/block/attention_statistics.hpp"
#include "kernel/ops/attention_weights.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

namespace {

constexpr double kEps = 1e-8;  // the paper's code (naive_softpick_attn.py: softpick(x, eps=1e-8))

Matrix softpick(Matrix S, const MaskMatrix& mask) {
  attention_weights<double>(AttentionKind::softpick, S, mask);
  return S;
}

// Central differences of the map along dS.
Matrix softpick_fd(const Matrix& S, const Matrix& dS, const MaskMatrix& mask, double h) {
  return (softpick(S + h * dS, mask) - softpick(S - h * dS, mask)) / (2 * h);
}

}  // namespace

TEST_CASE("softpick: rows worked by hand", "[variants][softpick]") {
  const MaskMatrix all = complete_mask(3);
  Matrix S(3, 3);
  // Row 0: (0, ln 2, ln 3): e^s - 1 = (0, 1, 2), so A = (0, 1, 2) / 3 (the shifted form: m = ln 3,
  // e^{s - m} - e^{-m} = (0, 1/3, 2/3), denominator 1 + eps).
  // Row 1: (ln 2, -ln 2, 0): e^s - 1 = (1, -1/2, 0): A = (1, 0, 0) / (3/2) (the negative entry only in
  // the denominator; m = ln 2: (1/2, -1/4, 0) / (3/4 + eps)).
  // Row 2: (-1, -2, -3): every e^s - 1 < 0, A = 0 (no weight to give: no sink).
  S << 0, std::log(2.0), std::log(3.0), std::log(2.0), -std::log(2.0), 0, -1, -2, -3;
  const Matrix A = softpick(S, all);
  CHECK(A(0, 0) == 0.0);
  CHECK(A(0, 1) == Approx((1.0 / 3) / (1 + kEps)).epsilon(1e-14));
  CHECK(A(0, 2) == Approx((2.0 / 3) / (1 + kEps)).epsilon(1e-14));
  CHECK(A(1, 0) == Approx(0.5 / (0.75 + kEps)).epsilon(1e-14));
  CHECK(A(1, 1) == 0.0);
  CHECK(A(1, 2) == 0.0);
  CHECK(A.row(2).cwiseAbs().maxCoeff() == 0.0);
  // Causal mask: row 1 sees (ln 2, -ln 2) only; the masked ln 3 would otherwise set m and the sum.
  const MaskMatrix causal = causal_mask(3);
  const Matrix Ac = softpick(S, causal);
  CHECK(Ac(0, 0) == 0.0);  // one allowed logit 0: e^0 - 1 = 0
  CHECK(Ac(1, 0) == Approx(0.5 / (0.75 + kEps)).epsilon(1e-14));
  CHECK(Ac(0, 1) == 0.0);
  CHECK(Ac(0, 2) == 0.0);
  CHECK(Ac(1, 2) == 0.0);
}

TEST_CASE("softpick: weights between 0 and 1, rows sum to at most 1, masked entries 0, no overflow",
          "[variants][softpick]") {
  RandomStream rng(7, 0);
  const int n = 12;
  for (const char* name : {"complete", "causal"}) {
    INFO(name);
    const MaskMatrix mask = backward_test_mask(name, n);
    Matrix S = 2.0 * gaussian(n, n, rng);
    const Matrix A = softpick(S, mask);
    for (int i = 0; i < n; ++i) {
      double sum = 0.0, plain_num = 0.0;
      for (int j = 0; j < n; ++j) {
        if (!mask(i, j)) {
          CHECK(A(i, j) == 0.0);
          continue;
        }
        CHECK(A(i, j) >= 0.0);
        CHECK(A(i, j) < 1.0);
        CHECK((A(i, j) == 0.0) == (S(i, j) <= 0.0));  // rectified: exactly the logits <= 0 get nothing
        sum += A(i, j);
        plain_num += std::abs(std::expm1(S(i, j)));
      }
      CHECK(sum <= 1.0);
      // The unshifted formula, ReLU(e^s - 1) / sum |e^s - 1|, to the size of eps.
      for (int j = 0; j < n; ++j)
        if (mask(i, j)) CHECK(std::abs(A(i, j) - std::max(std::expm1(S(i, j)), 0.0) / plain_num) < 1e-7);
    }
  }
  // Logits far beyond exp's range in both directions: finite; row 0 (m = 1000, e^-m = 0): u = (1, e^-10),
  // A = (1, e^-10) / (1 + e^-10 + eps); row 1: all logits < 0, weight 0.
  Matrix big(2, 2);
  big << 1000.0, 990.0, -1000.0, -990.0;
  const Matrix Ab = softpick(big, complete_mask(2));
  CHECK(Ab.allFinite());
  CHECK(Ab(0, 0) == Approx(1.0 / (1.0 + std::exp(-10.0) + kEps)).epsilon(1e-14));
  CHECK(Ab(0, 1) == Approx(std::exp(-10.0) / (1.0 + std::exp(-10.0) + kEps)).epsilon(1e-14));
  CHECK(Ab.row(1).cwiseAbs().maxCoeff() == 0.0);
  // float32 agrees with float64.
  const Matrix S = 2.0 * gaussian(n, n, rng);
  MatrixF Sf = S.cast<float>();
  attention_weights<float>(AttentionKind::softpick, Sf, complete_mask(n));
  CHECK((Sf.cast<double>() - softpick(S.cast<float>().cast<double>(), complete_mask(n))).cwiseAbs().maxCoeff() < 1e-6);
}

TEST_CASE("softpick: the map's adjoint and tangent against finite differences and each other",
          "[variants][softpick][backward][forward_mode]") {
  RandomStream rng(11, 0);
  const int n = 8;
  for (const char* name : {"complete", "causal"}) {
    INFO(name);
    const MaskMatrix mask = backward_test_mask(name, n);
    const Matrix S = gaussian(n, n, rng), dS = gaussian(n, n, rng), bar = gaussian(n, n, rng);
    const Matrix A = softpick(S, mask);
    const Matrix jvp = attention_weights_jvp<double>(AttentionKind::softpick, A, S, dS, mask);
    const Matrix fd = softpick_fd(S, dS, mask, 1e-6);
    CHECK((jvp - fd).norm() < 1e-7 * fd.norm());
    const Matrix adj = attention_weights_backward<double>(AttentionKind::softpick, A, S, bar, mask);
    // <bar, J dS> = <J^T bar, dS>, and J^T bar against finite differences of <bar, A(S)> entry by entry.
    CHECK(std::abs(bar.cwiseProduct(jvp).sum() - adj.cwiseProduct(dS).sum()) < 1e-13 * jvp.norm() * bar.norm());
    Matrix grad(n, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        Matrix e = Matrix::Zero(n, n);
        e(i, j) = 1.0;
        grad(i, j) = bar.cwiseProduct(softpick_fd(S, e, mask, 1e-6)).sum();
      }
    CHECK((adj - grad).norm() < 1e-7 * grad.norm());
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (!mask(i, j)) CHECK(adj(i, j) == 0.0);
    // The softmax's derivative at the same point must miss (the check can fail).
    const Matrix wrong = attention_weights_backward<double>(AttentionKind::softmax, A, S, bar, mask);
    CHECK((wrong - grad).norm() > 1e-2 * grad.norm());
  }
}

TEST_CASE("softpick: block adjoint and tangent against finite differences, dot-product test",
          "[variants][softpick][backward][forward_mode]") {
  int seed = 0;
  for (const NormPosition pos : {NormPosition::post, NormPosition::pre}) {
    for (const char* mask : {"complete", "causal"}) {
      Case k;
      k.pos = pos;
      k.m = pos == NormPosition::pre ? 4 : 0;
      k.attn_bias = pos == NormPosition::post;
      INFO(pos_name(pos) << " " << mask);
      RandomStream rng(60 + static_cast<std::uint64_t>(seed++), 0);
      Fixture f(k, backward_test_mask(mask, k.N));
      f.p.layer.attention.kind = AttentionKind::softpick;
      LayerWeights w = random_weights(k, rng);
      for (auto& q : w.q) q *= 2.0;  // logits of order 1 in both signs: the rectifier active
      Matrix X = gaussian(k.N, k.d, rng);
      const Matrix C = gaussian(k.N, k.d, rng), V = gaussian(k.N, k.d, rng);
      const BlockDerivativeCheck r = check_block_derivatives(k, X, w, f.p, C, V);
      INFO("dX " << r.dX << " dW_Q " << r.dW_Q << " JVP " << r.jvp << " dot " << r.dot);
      CHECK(r.dX < kTol);
      CHECK(r.dW_Q < kTol);
      CHECK(r.jvp < 1e-7);
      CHECK(r.dot < 1e-12);
    }
  }
}

TEST_CASE("softpick: a dormant head sinks on the first token under softmax, not under softpick",
          "[variants][softpick][attention_statistics]") {
  // Causal mask, d = 2: x_0 = (1, 0), x_j = (0, 1) + noise. W_Q sends x_j to q_j ~ (0, -1), W_K sends
  // x_0 to k_0 = (0, 1) and x_j to k_j ~ (0, 4): the logits are s_i0 ~ -1 and s_ij ~ -4 for j >= 1, a
  // head with nothing to attend to. Softmax must still give each row weight 1 and puts most of it on
  // token 0 (A_i0 = 1 / (1 + i e^-3) without the noise; row 0 has only itself): the attention sink
  // (Gu et al.'s sink rate 1 for this head). Softpick gives every such row weight 0 (row 0's only
  // logit is 0: e^0 - 1 = 0): sink weight 0, as the paper reports (sink rate 0%).
  const int n = 16;
  RandomStream rng(5, 0);
  Matrix X(n, 2);
  X.row(0) << 1.0, 0.0;
  for (int j = 1; j < n; ++j) X.row(j) << 0.05 * rng.normal(), 1.0 + 0.05 * rng.normal();
  LayerWeights w;
  Matrix Wq(2, 2), Wk(2, 2);
  Wq << 0, 0, 0, -1;
  Wk << 0, 1, 0, 4;
  w.q = {Wq};
  w.k = {Wk};
  w.v = {Matrix::Identity(2, 2)};
  const MaskMatrix mask = causal_mask(n);
  const Normalization none;
  AttentionStats stats[2];
  int at = 0;
  for (const AttentionKind kind : {AttentionKind::softmax, AttentionKind::softpick}) {
    LayerParams p{&mask, 1.0, 0.0, &none};
    p.attention.kind = kind;
    p.attention_statistics = true;
    LayerWorkspace ws(n, 2, 2);
    Matrix next;
    stats[at++] = attention_layer(X, w, p, ws, next).attention;
  }
  INFO("sink weight softmax " << stats[0].mean_sink_weight << " softpick " << stats[1].mean_sink_weight);
  CHECK(stats[0].mean_sink_weight > 0.7);
  CHECK(stats[0].sink_rate == 1.0);
  CHECK(stats[1].mean_sink_weight == 0.0);
  CHECK(stats[1].sink_rate == 0.0);
}
