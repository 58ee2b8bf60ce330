// attention.xpos (xPos's relative-position decay, Sun et al. 2023; kernel/ops/xpos.hpp): three
// tokens worked by hand, the decay through i - j only, its commuting with the rotary embedding,
// a block's attention by hand, the block's adjoint and tangent against finite differences and the
// dot-product test, and the keys with their cross-key check. Issue 34's example of a new attention
// variant in 4 files of sim/ (docs/dev/kernel.md, "The cost of a new attention variant").
#include "backward_support.hpp"

#include "config/config.hpp"
#include "kernel/model/mask_ranges.hpp"
#include "kernel/ops/qk_transforms.hpp"
#include "kernel/platform/fused_attention.hpp"
#include "kernel/trial/platform_table.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

namespace {
AttentionSettings xpos_with(double scale_base) {
  AttentionSettings a;
  a.xpos = true;
  a.xpos_scale_base = scale_base;
  return a;
}
}  // namespace

TEST_CASE("xpos: three tokens by hand, zeta by pair, logits through i - j only", "[variants][xpos]") {
  // d_k = 2, B = 1: one pair, zeta = 0.8 / 2.8 = 2/7; S_ij = (2/7)^(i-j) q_i.k_j.
  Matrix Q(3, 2), K(3, 2);
  Q << 1, 0, 0, 1, 1, 1;
  K << 1, 1, 1, 0, 0, 1;
  XposDecay::forward<double>(xpos_with(1.0), 0, Q, K, nullptr);
  const double z = 2.0 / 7.0;
  Matrix expected(3, 3);
  expected << 1, 1 / z, 0, z, 0, 1 / z, 2 * z * z, z, 1;
  CHECK((Q * K.transpose() - expected).cwiseAbs().maxCoeff() < 1e-14);
  // d_k = 4: the pairs' zeta (2j + 1.6) / 5.6 = 2/7 and 9/14.
  CHECK(std::abs(xpos_zeta(0, 4) - 2.0 / 7) < 1e-16);
  CHECK(std::abs(xpos_zeta(1, 4) - 2.0 / 7) < 1e-16);
  CHECK(std::abs(xpos_zeta(2, 4) - 9.0 / 14) < 1e-16);
  CHECK(std::abs(xpos_zeta(3, 4) - 9.0 / 14) < 1e-16);
  // The same q and k at every position: S_ij = f(i - j), constant along diagonals, and five
  // positions back each pair's part of q.k times zeta_j^(5/B).
  RandomStream rng(7, 0);
  const Matrix q = gaussian(1, 4, rng), k = gaussian(1, 4, rng);
  Matrix Qs = q.replicate(6, 1), Ks = k.replicate(6, 1);
  XposDecay::forward<double>(xpos_with(2.0), 0, Qs, Ks, nullptr);
  const Matrix S = Qs * Ks.transpose();
  for (int i = 0; i + 1 < 6; ++i)
    for (int j = 0; j + 1 < 6; ++j) CHECK(std::abs(S(i + 1, j + 1) - S(i, j)) < 1e-12 * (1 + std::abs(S(i, j))));
  const double far = std::pow(2.0 / 7, 5.0 / 2) * (q(0) * k(0) + q(1) * k(1)) +
                     std::pow(9.0 / 14, 5.0 / 2) * (q(2) * k(2) + q(3) * k(3));
  CHECK(std::abs(S(5, 0) - far) < 1e-14);
  CHECK(std::abs(S(0, 0) - q.cwiseProduct(k).sum()) < 1e-14);
}

TEST_CASE("xpos: commutes with rope, self-adjoint, and a block's attention by hand", "[variants][xpos]") {
  AttentionSettings a = xpos_with(3.0);
  a.rope = true;
  a.rope_theta = 5.0;
  RandomStream rng(8, 0);
  const Matrix Q0 = gaussian(5, 4, rng), K0 = gaussian(5, 4, rng);
  Matrix Q1 = Q0, K1 = K0, Q2 = Q0, K2 = K0;
  RotaryEmbedding::forward<double>(a, 0, Q1, K1, nullptr);
  XposDecay::forward<double>(a, 0, Q1, K1, nullptr);
  XposDecay::forward<double>(a, 0, Q2, K2, nullptr);
  RotaryEmbedding::forward<double>(a, 0, Q2, K2, nullptr);
  CHECK((Q1 - Q2).cwiseAbs().maxCoeff() < 1e-14);
  CHECK((K1 - K2).cwiseAbs().maxCoeff() < 1e-14);
  // <F U, V> = <U, F^T V> with the adjoint the list runs (diagonal: F^T = F).
  const HeadCacheT<double> none;
  const Matrix U = gaussian(5, 4, rng), V = gaussian(5, 4, rng);
  Matrix FU = U, FkU = U, FtV = V, FktV = V;
  XposDecay::tangent<double>(a, 0, none, FU, FkU);
  XposDecay::adjoint<double>(a, 0, none, FtV, FktV);
  CHECK(std::abs(FU.cwiseProduct(V).sum() - U.cwiseProduct(FtV).sum()) < 1e-13 * U.norm() * V.norm());
  CHECK(std::abs(FkU.cwiseProduct(V).sum() - U.cwiseProduct(FktV).sum()) < 1e-13 * U.norm() * V.norm());
  // The block (W_Q = W_K = W_V = I, d_QK = 1, one head, no residual), B = 1, d_k = 2: x_0 = (1, 0),
  // x_1 = (1, 2), S = [[1, 3.5], [2/7, 5]].
  Matrix X(2, 2);
  X << 1, 0, 1, 2;
  Case k;
  k.N = 2, k.d = 2, k.dk = 2, k.H = 1, k.alpha = 0.0, k.d_qk = 1.0;
  k.pos = NormPosition::post, k.norm = NormType::none, k.norms_from_file = false;
  Fixture f(k, backward_test_mask("complete", 2));
  LayerWeights w;
  for (auto* m : {&w.q, &w.k, &w.v}) m->push_back(Matrix::Identity(2, 2));
  BlockParams p = f.p;
  p.layer.attention.xpos = true;
  p.layer.attention.xpos_scale_base = 1.0;
  p.layer.keep_attention = true;
  BlockWorkspace ws(2, 2, 2);
  Matrix Y;
  transformer_block(X, w, p, ws, Y);
  const double a01 = std::exp(3.5) / (std::exp(1.0) + std::exp(3.5));
  const double a10 = std::exp(2.0 / 7) / (std::exp(2.0 / 7) + std::exp(5.0));
  CHECK(std::abs(ws.layer.attention_mean(0, 1) - a01) < 1e-14);
  CHECK(std::abs(ws.layer.attention_mean(1, 0) - a10) < 1e-14);
}

TEST_CASE("xpos: adjoint and tangent of the block against finite differences, dot-product test",
          "[variants][xpos][backward][forward_mode]") {
  double worst = 0.0;
  int seed = 0;
  for (const int with : {0, 1, 2}) {  // xpos alone, after rope, after QK-normalisation and rope
    for (const char* mask : {"complete", "causal"}) {
      Case k;
      k.dk = 4;  // pairs
      k.qk_norm = with == 2;
      k.m = k.qk_norm ? 0 : 4;
      INFO("with " << with << " " << mask);
      RandomStream rng(80 + static_cast<std::uint64_t>(seed++), 0);
      Fixture f(k, backward_test_mask(mask, k.N));
      f.p.layer.attention.xpos = true;
      f.p.layer.attention.xpos_scale_base = 2.0;  // zeta^(i/B) from 1 to 0.08 over 5 positions
      f.p.layer.attention.rope = with > 0;
      f.p.layer.attention.rope_theta = 3.0;
      LayerWeights w = random_weights(k, rng);
      Matrix X = gaussian(k.N, k.d, rng);
      const Matrix C = gaussian(k.N, k.d, rng), V = gaussian(k.N, k.d, rng);
      const BlockDerivativeCheck r = check_block_derivatives(k, X, w, f.p, C, V);
      INFO("dX " << r.dX << " dW_Q " << r.dW_Q << " JVP " << r.jvp << " dot " << r.dot);
      CHECK(r.dX < kTol);
      CHECK(r.dW_Q < kTol);
      CHECK(r.jvp < 1e-7);
      CHECK(r.dot < 1e-12);
      BlockParams plain = f.p;  // the adjoint without the decay must miss
      plain.layer.attention.xpos = false;
      BlockGrads gp;
      block_backward(X, w, plain, C, gp);
      CHECK(rel_err(gp.dq[0], r.grads.dq[0]) > 1e-2);
      worst = std::max({worst, r.dX, r.dW_Q, r.jvp});
    }
  }
  WARN("xpos: worst relative error against FD " << worst);
}

TEST_CASE("xpos: float32 forward and adjoint near float64, computed in float", "[variants][xpos][float32]") {
  Case k;
  k.dk = 4;
  k.m = 4;
  RandomStream rng(90, 0);
  Fixture f(k, backward_test_mask("causal", k.N));
  f.p.layer.attention.xpos = true;
  f.p.layer.attention.xpos_scale_base = 2.0;
  f.p.layer.attention.rope = true;
  LayerWeights w = random_weights(k, rng);
  LayerWeightsT<float> wf;
  cast_weights(w, wf);
  for (auto* m : {&w.q, &w.k, &w.v})  // the double block on the weights the float block uses
    for (auto& x : *m) x = x.cast<float>().cast<double>();
  const Matrix X = gaussian(k.N, k.d, rng).cast<float>().cast<double>(), C = gaussian(k.N, k.d, rng);
  BlockWorkspace wsd(k.N, k.d, k.dk);
  BlockWorkspaceT<float> wsf(k.N, k.d, k.dk);
  Matrix Yd;
  MatrixF Yf;
  const MatrixF Xf = X.cast<float>();
  transformer_block(X, w, f.p, wsd, Yd);
  transformer_block(Xf, wf, f.p, wsf, Yf);
  const double forward = rel_err(Yf.cast<double>(), Yd);
  BlockGrads gd, gf;
  block_backward(X, w, f.p, C, gd);
  BlockParams single = f.p;
  single.single = true;  // the float instance of the adjoint
  block_backward(X, w, single, C, gf);
  const double adjoint = rel_err(gf.dX, gd.dX);
  INFO("forward " << forward << " adjoint " << adjoint);
  CHECK(forward < 1e-5);
  CHECK(forward > 1e-10);  // float arithmetic was used
  CHECK(adjoint < 1e-4);
  CHECK(adjoint > 1e-10);
}

TEST_CASE("xpos: the general path only, keys and their cross-key check", "[variants][xpos]") {
  const MaskMatrix mask = causal_mask(4);
  const Normalization none;
  LayerParams p{&mask, 1.0, 0.0, &none};
  p.attention.xpos = true;
  CHECK(p.attention.needs_general_path());
  CHECK_FALSE(kernel_applies(cpu_attention_kernel(), p, false, analyse_rows(mask)));
  const Config c = make_config({{"attention.xpos", "true"}, {"attention.xpos_scale_base", "64"}, {"model.tokens", "300"}});
  CHECK(c.attention.xpos);
  CHECK(c.attention.xpos_scale_base == 64.0);
  CHECK(cpu_platform_refusal(c) == "attention.xpos = true");
  CHECK(resolved_platform(c) == Platform::reference);
  CHECK_THROWS_WITH(make_config({{"attention.xpos", "true"}, {"model.key_dim", "3"}}),
                    Catch::Contains("attention.xpos") && Catch::Contains("even model.key_dim"));
  CHECK_THROWS_WITH(make_config({{"attention.xpos", "true"}, {"attention.kind", "random_markov"}}),
                    Catch::Contains("attention.xpos") && Catch::Contains("random_markov"));
  CHECK_THROWS_WITH(make_config({{"attention.xpos_scale_base", "0"}}), Catch::Contains("attention.xpos_scale_base"));
  CHECK_THROWS_WITH(make_config({{"model.layers", "4"}, {"model.key_dim", "3"},
                                 {"model.layer_overrides", "0-1:attention.xpos=true"}}),
                    Catch::Contains("attention.xpos"));
  CHECK(make_config({{"model.layers", "4"}, {"model.layer_overrides", "0-1:attention.xpos=true"}})
            .layer_overrides.at(0).spec->attention.xpos);
}

TEST_CASE("xpos: centred positions (torchscale's), exact beyond the old limit N / B = 566, refused past the new one",
          "[variants][xpos]") {
  // torchscale's XPOS: positions from (-N) // 2 (Python's floor division): -3..1 for N = 5, -2..1 for N = 4.
  CHECK(xpos_position(0, 5) == -3.0);
  CHECK(xpos_position(4, 5) == 1.0);
  CHECK(xpos_position(0, 4) == -2.0);
  CHECK(xpos_position(3, 4) == 1.0);
  // By hand, N = 3, d_k = 2, B = 1, zeta = 2/7, positions -2, -1, 0: q_0 times (2/7)^-2 = 12.25, k_0 by (2/7)^2.
  Matrix Q = Matrix::Ones(3, 2), K = Matrix::Ones(3, 2);
  XposDecay::forward<double>(xpos_with(1.0), 0, Q, K, nullptr);
  CHECK(std::abs(Q(0, 0) - 12.25) < 1e-13);
  CHECK(std::abs(Q(1, 1) - 3.5) < 1e-14);
  CHECK(Q(2, 0) == 1.0);
  CHECK(std::abs(K(0, 1) - 4.0 / 49) < 1e-16);
  // Positions from 0 overflowed at N / B = log(DBL_MAX) / log(7/2) = 566.6 (float: 70.8): the largest key
  // factor (7/2)^(N/B). Centred, N = 1000 at B = 1 under a causal mask gives every logit by the formula
  // S_ij = sum_k zeta_k^(i - j) q_ik k_jk (computed directly here).
  CHECK_FALSE(std::isfinite(std::pow(3.5, 999.0)));
  const auto logits_agree = [](auto tag, int N, double tol) {
    using T = decltype(tag);
    RandomStream rng(static_cast<std::uint64_t>(N), 0);
    const Matrix Q0 = gaussian(N, 4, rng), K0 = gaussian(N, 4, rng);
    MatrixT<T> Qt = Q0.cast<T>(), Kt = K0.cast<T>();
    XposDecay::forward<T>(xpos_with(1.0), 0, Qt, Kt, nullptr);
    const Matrix S = (Qt * Kt.transpose()).template cast<double>();
    double worst = 0.0;
    int nonfinite = 0;
    for (int i = 0; i < N; ++i)
      for (int j = 0; j <= i; ++j) {
        double ref = 0.0, size = 0.0;
        for (int k = 0; k < 4; ++k) {
          const double term = std::pow(xpos_zeta(k, 4), i - j) * Q0(i, k) * K0(j, k);
          ref += term;
          size += std::abs(term);
        }
        nonfinite += !std::isfinite(S(i, j));
        worst = std::max(worst, std::abs(S(i, j) - ref) / (size + 1e-300));
      }
    INFO("N " << N << " worst relative error " << worst);
    CHECK(nonfinite == 0);
    CHECK(worst < tol);
  };
  logits_agree(double(), 1000, 1e-13);
  logits_agree(float(), 100, 3e-5);
  // The refusal up front names N / B and the limit: under a causal mask ceil(N/2)/B log2(7/2) <= 1000
  // (float64) or 104 (float32): at most 1106 and 114 tokens at B = 1; with keys after the query (N - 1)/B
  // log2(7/2) <= the same: at most 554 and 58.
  const auto xpos_run = [](const char* N, const char* mask, const char* precision) {
    return make_config({{"attention.xpos", "true"}, {"attention.xpos_scale_base", "1"}, {"model.tokens", N},
                        {"mask.type", mask}, {"run.precision", precision}});
  };
  CHECK(xpos_run("1106", "causal", "float64").attention.xpos);
  CHECK_THROWS_WITH(xpos_run("1108", "causal", "float64"),
                    Catch::Contains("attention.xpos") && Catch::Contains("N / B = 1108") &&
                        Catch::Contains("about 1106 in float64") && Catch::Contains("at most 1106 tokens"));
  CHECK(xpos_run("554", "complete", "float64").attention.xpos);
  CHECK_THROWS_WITH(xpos_run("556", "complete", "float64"),
                    Catch::Contains("about 553 in float64") && Catch::Contains("keys after the query"));
  CHECK(xpos_run("114", "unidirectional_sliding_window", "float32").attention.xpos);
  CHECK_THROWS_WITH(xpos_run("116", "causal", "float32"), Catch::Contains("about 115 in float32"));
  CHECK_THROWS_WITH(xpos_run("60", "sliding_window", "float32"), Catch::Contains("at most 58 tokens"));
  CHECK(make_config({{"attention.xpos", "true"}, {"model.tokens", "20000"}, {"mask.type", "causal"}})
            .attention.xpos);  // B = 512 (torchscale's): N / B = 39
  CHECK_THROWS_WITH(make_config({{"model.layers", "4"}, {"model.tokens", "1200"}, {"mask.type", "causal"},
                                 {"model.layer_overrides", "2-:attention.xpos=true,attention.xpos_scale_base=1"}}),
                    Catch::Contains("N / B = 1200"));
}
