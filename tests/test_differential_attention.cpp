// attention.differential (Ye et al. 2024; kernel/ops/differential_attention.hpp): a 2-token case
// worked by hand, rows summing to 1 - lambda with masked entries exactly 0, lambda = 0 against
// ordinary softmax attention with the first halves of W_Q and W_K, the head norm's rows (the paper's
// factor 1 - lambda_init and rcsim's earlier 1 - lambda), the
// lambda_init schedule by layer, the block's adjoint and tangent against finite differences
// (check_block_derivatives), and the keys' refusals (fast and fused paths, odd d_k, other logit
// settings, the ergodicity coefficient).
#include "backward_support.hpp"

#include "config/config.hpp"
#include "kernel/model/mask_ranges.hpp"
#include "kernel/ops/differential_attention.hpp"
#include "kernel/platform/fused_attention.hpp"
#include "kernel/trial/platform_table.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

namespace {

// One post-LN layer without normalisation or residual: X_next = sum_h A_h X W_V,h; returns X_next and
// keeps the head-averaged attention in `mean`.
Matrix plain_layer(const Matrix& X, const LayerWeights& w, LayerParams p, Matrix& mean) {
  p.keep_attention = true;
  LayerWorkspace ws(static_cast<int>(X.rows()), static_cast<int>(X.cols()), static_cast<int>(w.q[0].cols()));
  Matrix Y;
  attention_layer(X, w, p, ws, Y);
  mean = ws.attention_mean;
  return Y;
}

}  // namespace

TEST_CASE("differential attention: two tokens by hand, rows sum to 1 - lambda", "[variants][differential]") {
  // d = d_k = 4, W_Q = W_K = W_V = I, d_QK = 2 (each map's scale 1/sqrt(1)): Q1 = K1 = X's columns
  // 0-1, Q2 = K2 = columns 2-3. x_0 = (1, 0, 0, 2), x_1 = (0, 1, 1, 0):
  //   S1 = [[1, 0], [0, 1]],  S2 = [[4, 0], [0, 1]].
  Matrix X(2, 4);
  X << 1, 0, 0, 2, 0, 1, 1, 0;
  LayerWeights w;
  for (auto* m : {&w.q, &w.k, &w.v}) m->push_back(Matrix::Identity(4, 4));
  const MaskMatrix mask = complete_mask(2);
  const Normalization none;
  LayerParams p{&mask, 2.0, 0.0, &none};
  p.attention.differential = true;
  const double lam = 0.9;
  p.attention.diff_lambda = lam;
  Matrix A;
  const Matrix Y = plain_layer(X, w, p, A);
  const double e = std::exp(1.0), e4 = std::exp(4.0);
  Matrix expected(2, 2);
  expected << e / (e + 1) - lam * e4 / (e4 + 1), 1 / (e + 1) - lam / (e4 + 1),  //
      1 / (1 + e) - lam / (1 + e), e / (1 + e) - lam * e / (1 + e);
  CHECK((A - expected).cwiseAbs().maxCoeff() < 1e-15);
  CHECK(std::abs(A.row(0).sum() - (1 - lam)) < 1e-15);
  CHECK(std::abs(A.row(1).sum() - (1 - lam)) < 1e-15);
  CHECK(A(0, 0) < -0.15);  // e/(e+1) - 0.9 e^4/(e^4+1) = -0.153: a negative weight on the diagonal
  CHECK((Y - expected * X).cwiseAbs().maxCoeff() < 1e-15);
  // lambda_init(l) = 0.8 - 0.6 exp(-0.3 (l - 1)): 0.2 at the first layer, -> 0.8 with depth.
  CHECK(std::abs(diff_lambda_init(1) - 0.2) < 1e-16);
  CHECK(std::abs(diff_lambda_init(3) - (0.8 - 0.6 * std::exp(-0.6))) < 1e-16);
  p.attention.diff_lambda = std::numeric_limits<double>::quiet_NaN();  // auto
  p.layer_number = 3;
  CHECK(diff_lambda(p) == diff_lambda_init(3));
  plain_layer(X, w, p, A);
  CHECK(std::abs(A.row(0).sum() - (1.0 - diff_lambda_init(3))) < 1e-15);
  BlockParams bp;
  bp.layer = p;
  CHECK(at_layer(bp, 4).layer.layer_number == 5);  // at_layer numbers the blocks from 1
}

TEST_CASE("differential attention: row sums 1 - lambda, masked entries exactly 0, lambda = 0 is softmax",
          "[variants][differential]") {
  RandomStream rng(71, 0);
  const int N = 7, d = 5, dk = 6;
  const Normalization none;
  for (const char* type : {"causal", "window", "custom"}) {
    INFO(type);
    const MaskMatrix mask = backward_test_mask(type, N);
    LayerWeights w;
    w.q.push_back(gaussian(d, dk, rng, 0.9));
    w.k.push_back(gaussian(d, dk, rng, 0.9));
    w.v.push_back(gaussian(d, d, rng, 0.6));
    const Matrix X = gaussian(N, d, rng);
    LayerParams p{&mask, 3.0, 0.0, &none};
    p.attention.differential = true;
    for (const double lam : {0.0, 0.35, 0.8, 1.3}) {
      p.attention.diff_lambda = lam;
      Matrix A;
      plain_layer(X, w, p, A);
      for (int i = 0; i < N; ++i) {
        CHECK(std::abs(A.row(i).sum() - (1.0 - lam)) < 1e-14);
        for (int j = 0; j < N; ++j)
          if (!mask(i, j)) CHECK(A(i, j) == 0.0);  // exactly, not merely small
      }
      if (lam >= 0.8) CHECK(A.minCoeff() < 0.0);  // some weight negative at these lambdas
    }
    // lambda = 0: ordinary softmax attention with the first halves of W_Q, W_K and d_QK / 2.
    p.attention.diff_lambda = 0.0;
    Matrix A_diff, A_soft;
    const Matrix Y_diff = plain_layer(X, w, p, A_diff);
    LayerWeights first = w;
    first.q[0] = w.q[0].leftCols(dk / 2);
    first.k[0] = w.k[0].leftCols(dk / 2);
    LayerParams q{&mask, 1.5, 0.0, &none};
    const Matrix Y_soft = plain_layer(X, first, q, A_soft);
    CHECK((A_diff - A_soft).cwiseAbs().maxCoeff() < 1e-15);
    CHECK((Y_diff - Y_soft).cwiseAbs().maxCoeff() < 1e-15 * Y_soft.cwiseAbs().maxCoeff() * N);
    // ... and not the second halves (the split is not trivially ignored).
    first.q[0] = w.q[0].rightCols(dk / 2);
    first.k[0] = w.k[0].rightCols(dk / 2);
    plain_layer(X, first, q, A_soft);
    CHECK((A_diff - A_soft).cwiseAbs().maxCoeff() > 1e-3);
  }
}

TEST_CASE("differential attention: the head norm gives rows of RMS 1 - lambda_init (the paper's), or 1 - lambda",
          "[variants][differential]") {
  RandomStream rng(72, 0);
  const int N = 6, d = 4;
  const MaskMatrix mask = causal_mask(N);
  const Normalization none;
  LayerWeights w;
  w.q.push_back(gaussian(d, 4, rng));
  w.k.push_back(gaussian(d, 4, rng));
  w.v.push_back(gaussian(d, d, rng));
  const Matrix X = gaussian(N, d, rng);
  LayerParams p{&mask, 4.0, 0.0, &none};
  p.attention.differential = true;
  p.attention.diff_head_norm = true;
  p.layer_number = 2;  // lambda_init(2) = 0.8 - 0.6 e^-0.3 = 0.3555
  const double lam_init = 0.8 - 0.6 * std::exp(-0.3);
  // The paper's code (microsoft/unilm Diff-Transformer, multihead_diffattn.py): subln(attn) * (1 -
  // lambda_init), lambda_init a constant of the layer, whatever the learned lambda of the maps. By hand:
  // P / sqrt(mean(P^2) + 1e-5) s, P = A X W_V, for the maps' lambda auto, 0.5 and 1 (where 1 - lambda
  // would zero the head) with s = 1 - lambda_init(2) = 0.6445; then rcsim's earlier convention, s =
  // 1 - lambda (0.5; 0 at lambda = 1; -0.3 at 1.3, a flipped head).
  struct Arm {
    double lambda;  // NaN: auto
    DiffHeadScale scale;
    double s;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Arm& arm : {Arm{nan, DiffHeadScale::lambda_init, 1 - lam_init}, Arm{0.5, DiffHeadScale::lambda_init, 1 - lam_init},
                         Arm{1.0, DiffHeadScale::lambda_init, 1 - lam_init}, Arm{nan, DiffHeadScale::lambda, 1 - lam_init},
                         Arm{0.5, DiffHeadScale::lambda, 0.5}, Arm{1.0, DiffHeadScale::lambda, 0.0},
                         Arm{1.3, DiffHeadScale::lambda, -0.3}}) {
    INFO("lambda " << arm.lambda << " scale " << static_cast<int>(arm.scale));
    p.attention.diff_lambda = arm.lambda;
    p.attention.diff_head_scale = arm.scale;
    CHECK(std::abs(diff_head_scale(p) - arm.s) < 1e-15);
    Matrix A;
    const Matrix Y = plain_layer(X, w, p, A);
    const Matrix P = A * X * w.v[0];
    for (int i = 0; i < N; ++i) {
      const double rms = std::sqrt(P.row(i).squaredNorm() / d + 1e-5);
      CHECK((Y.row(i) - arm.s * P.row(i) / rms).cwiseAbs().maxCoeff() < 1e-14);
    }
    if (arm.s != 0.0) CHECK(Y.cwiseAbs().maxCoeff() > 0.1);
  }
  // The two conventions 37.5% apart at lambda = 0.5 in the first layer (lambda_init(1) = 0.2: 0.8 vs 0.5).
  p.layer_number = 1;
  p.attention.diff_lambda = 0.5;
  p.attention.diff_head_scale = DiffHeadScale::lambda_init;
  const double paper = diff_head_scale(p);
  p.attention.diff_head_scale = DiffHeadScale::lambda;
  CHECK(std::abs((paper - diff_head_scale(p)) / paper - 0.375) < 1e-15);
}

TEST_CASE("differential attention: adjoint and tangent of the block against finite differences",
          "[variants][differential][backward][forward_mode]") {
  double worst = 0.0;
  int seed = 0;
  // No head norm; the paper's (1 - lambda_init); rcsim's earlier (1 - lambda) at lambda 1.3 (s < 0).
  for (const int head_norm : {0, 1, 2}) {
    for (const int dv : {0, 3}) {
      for (const char* mask : {"complete", "causal"}) {
        Case k;
        k.dk = 4;  // halves of 2
        k.dv = dv;
        k.m = 4;
        k.attn_bias = dv > 0;
        INFO("head_norm " << head_norm << " dv " << dv << " " << mask);
        RandomStream rng(80 + static_cast<std::uint64_t>(seed++), 0);
        Fixture f(k, backward_test_mask(mask, k.N));
        f.p.layer.attention.differential = true;
        f.p.layer.attention.diff_head_norm = head_norm > 0;
        f.p.layer.layer_number = 4;  // lambda_init(4) = 0.556
        if (head_norm == 2) {
          f.p.layer.attention.diff_head_scale = DiffHeadScale::lambda;
          f.p.layer.attention.diff_lambda = 1.3;
        }
        const LayerWeights w = random_weights(k, rng);
        const Matrix X = gaussian(k.N, k.d, rng);
        const Matrix C = gaussian(k.N, k.d, rng), V = gaussian(k.N, k.d, rng);
        const BlockDerivativeCheck r = check_block_derivatives(k, X, w, f.p, C, V);
        INFO("dX " << r.dX << " dW_Q " << r.dW_Q << " JVP " << r.jvp << " dot " << r.dot);
        CHECK(r.dX < kTol);
        CHECK(r.dW_Q < kTol);
        CHECK(r.jvp < 1e-7);
        CHECK(r.dot < 1e-12);
        BlockParams plain = f.p;  // the ordinary adjoint must miss
        plain.layer.attention.differential = false;
        plain.layer.attention.diff_head_norm = false;
        BlockGrads gp;
        block_backward(X, w, plain, C, gp);
        CHECK(rel_err(gp.dq[0], r.grads.dq[0]) > 1e-2);
        worst = std::max({worst, r.dX, r.dW_Q, r.jvp});
      }
    }
  }
  WARN("differential attention: worst relative error against FD " << worst);
}

TEST_CASE("differential attention with RoPE: each half rotated as a head of d_k / 2 (the paper's code)",
          "[variants][differential][rope]") {
  // microsoft/unilm Diff-Transformer: q viewed as 2H heads of head_dim = d_k / 2, apply_rotary_emb(...,
  // interleaved=True) on each: the pair (2j, 2j+1) of each half by the angle i theta^(-2j/(d_k/2)). At
  // lambda = 0 the head is softmax attention of the first half rotated as a head of d_k / 2 (and with the
  // halves of W_Q, W_K swapped, of the second half): rotating the whole d_k (angles i theta^(-2j/d_k))
  // would differ in the second pair of each half.
  RandomStream rng(73, 0);
  const int N = 6, d = 5, dk = 8, m = dk / 2;
  const MaskMatrix mask = causal_mask(N);
  const Normalization none;
  LayerWeights w;
  w.q.push_back(gaussian(d, dk, rng, 0.9));
  w.k.push_back(gaussian(d, dk, rng, 0.9));
  w.v.push_back(gaussian(d, d, rng, 0.6));
  const Matrix X = gaussian(N, d, rng);
  LayerParams p{&mask, 4.0, 0.0, &none};  // each map 1/sqrt(d_QK / 2) = 1/sqrt(2)
  p.attention.differential = true;
  p.attention.diff_lambda = 0.0;
  p.attention.rope = true;
  p.attention.rope_theta = 4.0;  // the second pair's frequency 4^(-1/2) = 0.5 per half, 4^(-1/4) over d_k
  for (const bool second : {false, true}) {
    INFO("half " << (second ? "second" : "first"));
    LayerWeights ws = w, half = w;
    if (second)
      for (auto* W : {&ws.q[0], &ws.k[0]}) *W = (Matrix(d, dk) << W->rightCols(m), W->leftCols(m)).finished();
    half.q[0] = w.q[0].middleCols(second ? m : 0, m);
    half.k[0] = w.k[0].middleCols(second ? m : 0, m);
    LayerParams q{&mask, 2.0, 0.0, &none};
    q.attention.rope = true;
    q.attention.rope_theta = 4.0;
    Matrix A_diff, A_soft, A_whole;
    plain_layer(X, ws, p, A_diff);
    plain_layer(X, half, q, A_soft);
    CHECK((A_diff - A_soft).cwiseAbs().maxCoeff() < 1e-14);
    // The rotation over the whole d_k (the ordinary head's) is another map.
    LayerWeights whole = w;
    whole.q[0] = Matrix::Zero(d, dk);
    whole.k[0] = Matrix::Zero(d, dk);
    whole.q[0].leftCols(m) = half.q[0];
    whole.k[0].leftCols(m) = half.k[0];
    LayerParams r{&mask, 2.0, 0.0, &none};
    r.attention.rope = true;
    r.attention.rope_theta = 4.0;
    plain_layer(X, whole, r, A_whole);
    CHECK((A_diff - A_whole).cwiseAbs().maxCoeff() > 1e-3);
  }
  // Adjoint and tangent with RoPE against finite differences and the dot-product test.
  int seed = 0;
  for (const bool head_norm : {false, true}) {
    for (const char* mask_type : {"complete", "causal"}) {
      Case k;
      k.dk = 4;  // halves of 2: one pair each
      k.m = 4;
      INFO("head_norm " << head_norm << " " << mask_type);
      RandomStream r2(90 + static_cast<std::uint64_t>(seed++), 0);
      Fixture f(k, backward_test_mask(mask_type, k.N));
      f.p.layer.attention.differential = true;
      f.p.layer.attention.diff_head_norm = head_norm;
      f.p.layer.attention.rope = true;
      f.p.layer.attention.rope_theta = 3.0;
      f.p.layer.layer_number = 2;
      const LayerWeights wr = random_weights(k, r2);
      const Matrix Xr = gaussian(k.N, k.d, r2);
      const Matrix C = gaussian(k.N, k.d, r2), V = gaussian(k.N, k.d, r2);
      const BlockDerivativeCheck res = check_block_derivatives(k, Xr, wr, f.p, C, V);
      INFO("dX " << res.dX << " dW_Q " << res.dW_Q << " JVP " << res.jvp << " dot " << res.dot);
      CHECK(res.dX < kTol);
      CHECK(res.dW_Q < kTol);
      CHECK(res.jvp < 1e-7);
      CHECK(res.dot < 1e-12);
      BlockParams plain = f.p;  // the adjoint without the rotation must miss
      plain.layer.attention.rope = false;
      BlockGrads gp;
      block_backward(Xr, wr, plain, C, gp);
      CHECK(rel_err(gp.dq[0], res.grads.dq[0]) > 1e-2);
    }
  }
}

TEST_CASE("differential attention: the general path only, keys and their refusals", "[variants][differential]") {
  const MaskMatrix mask = causal_mask(4);
  const Normalization none;
  LayerParams p{&mask, 1.0, 0.0, &none};
  p.attention.differential = true;
  CHECK(p.attention.needs_general_path());
  CHECK_FALSE(kernel_applies(cpu_attention_kernel(), p, false, analyse_rows(mask)));
  const Config c = make_config({{"attention.differential", "true"},
                                {"attention.diff_lambda", "0.3"},
                                {"attention.diff_head_norm", "true"},
                                {"model.tokens", "300"}});
  CHECK(c.attention.differential);
  CHECK(c.attention.diff_lambda == 0.3);
  CHECK(c.attention.diff_head_norm);
  CHECK(c.attention.diff_head_scale == DiffHeadScale::lambda_init);  // the paper's by default
  CHECK(make_config({{"attention.differential", "true"},
                     {"attention.diff_head_norm", "true"},
                     {"attention.diff_head_scale", "lambda"}})
            .attention.diff_head_scale == DiffHeadScale::lambda);
  CHECK_THROWS_WITH(make_config({{"attention.differential", "true"}, {"attention.diff_head_scale", "lambda"}}),
                    Catch::Contains("attention.diff_head_scale") && Catch::Contains("attention.diff_head_norm"));
  CHECK_THROWS_WITH(make_config({{"attention.differential", "true"},
                                 {"attention.diff_head_norm", "true"},
                                 {"attention.diff_head_scale", "one"}}),
                    Catch::Contains("attention.diff_head_scale") && Catch::Contains("lambda_init"));
  CHECK(cpu_platform_refusal(c) == "attention.differential = true");
  CHECK(resolved_platform(c) == Platform::reference);
  CHECK(std::isnan(make_config({{"attention.differential", "true"}}).attention.diff_lambda));  // auto
  CHECK_THROWS_WITH(make_config({{"attention.differential", "true"}, {"model.key_dim", "3"}}),
                    Catch::Contains("attention.differential") && Catch::Contains("even model.key_dim"));
  CHECK(make_config({{"attention.differential", "true"}, {"attention.rope", "true"}, {"model.key_dim", "8"}})
            .attention.rope);  // the paper's models use RoPE
  CHECK_THROWS_WITH(make_config({{"attention.differential", "true"}, {"attention.rope", "true"}, {"model.key_dim", "6"}}),
                    Catch::Contains("attention.differential") && Catch::Contains("multiple of 4"));
  CHECK_THROWS_WITH(make_config({{"attention.differential", "true"}, {"attention.xpos", "true"}}),
                    Catch::Contains("attention.differential") && Catch::Contains("attention.xpos"));
  CHECK_THROWS_WITH(make_config({{"attention.differential", "true"}, {"attention.qk_norm", "true"}}),
                    Catch::Contains("attention.differential") && Catch::Contains("attention.qk_norm"));
  CHECK_THROWS_WITH(make_config({{"attention.differential", "true"}, {"attention.kind", "usa"}}),
                    Catch::Contains("attention.differential") && Catch::Contains("attention.kind"));
  CHECK_THROWS_WITH(make_config({{"attention.differential", "true"}, {"attention.shape_c", "1"}}),
                    Catch::Contains("attention.shape"));
  CHECK_THROWS_WITH(make_config({{"attention.diff_lambda", "0.5"}}),
                    Catch::Contains("attention.diff_lambda") && Catch::Contains("attention.differential = true"));
  CHECK_THROWS_WITH(make_config({{"attention.diff_head_norm", "true"}}), Catch::Contains("attention.diff_head_norm"));
  CHECK_THROWS_WITH(make_config({{"attention.differential", "true"}, {"output.measures", "attn_rank,ergodicity"}}),
                    Catch::Contains("ergodicity"));
  CHECK(make_config({{"attention.differential", "true"}, {"output.measures", "attn_rank"}})
            .attention.differential);
  CHECK(make_config({{"model.layers", "4"}, {"model.layer_overrides", "0-1:attention.differential=true"}})
            .layer_overrides.at(0)
            .spec->attention.differential);
}
