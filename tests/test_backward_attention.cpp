// The attention head's adjoint against finite differences: masks, heads, d_QK, W_O, USA, head mean,
// the biases b_Q, b_K, b_V, b_O, shaped attention and gap removal, additive logit biases (ALiBi,
// decay), QK-normalisation and random-Markov attention; the keys of these variants.
#include "backward_support.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

TEST_CASE("attention block: masks, heads, d_QK, W_O, USA, head mean against FD", "[backward]") {
  for (const std::string mask : {"complete", "causal", "window", "custom"}) {
    Case k;
    k.norm = NormType::none;
    k.pos = NormPosition::post;
    k.alpha = 0.0;
    SECTION("softmax, 2 heads, mask " + mask) {
      const StackCheck r = check_stack(k, mask, 1, 11);
      CHECK(r.worst() < kTol);
      WARN("attention block, mask " << mask << ": largest relative error against FD " << r.worst());
    }
    SECTION("W_O, head mean, d_QK = 0.25, mask " + mask) {
      k.dv = 2;
      k.head_mean = true;
      k.d_qk = 0.25;
      const StackCheck r = check_stack(k, mask, 1, 12);
      CHECK(r.worst() < kTol);
      WARN("attention block, mask " << mask << ": largest relative error against FD " << r.worst());
      CHECK(r.o < kTol);
    }
    SECTION("hardmax, mask " + mask) {  // A is piecewise constant in S: only W_V and X through V
      k.hardmax = true;
      const StackCheck r = check_stack(k, mask, 1, 14);
      CHECK(r.worst() < kTol);
      CHECK(r.q == 0.0);  // the FD gradient is 0 and so is the adjoint's, exactly
      CHECK(r.k == 0.0);
      WARN("attention block, hardmax, mask " << mask << ": largest relative error against FD " << r.worst());
    }
    SECTION("USA, mask " + mask) {
      k.usa = true;
      k.d_qk = 8.0;  // smaller logits: exp(S) has large higher derivatives, which FD's truncation feels
      const StackCheck r = check_stack(k, mask, 1, 13);
      CHECK(r.worst() < kTol);
      WARN("attention block, mask " << mask << ": largest relative error against FD " << r.worst());
    }
  }
}

TEST_CASE("attention biases b_Q, b_K, b_V, b_O against FD (and W_Q, W_K, W_V, W_O with them)", "[backward]") {
  double worst = 0.0;
  for (const std::string mask : {"complete", "causal", "custom"}) {
    Case k;
    k.attn_bias = true;
    SECTION("attention alone, 2 heads, mask " + mask) {
      k.norm = NormType::none;
      k.pos = NormPosition::post;
      k.alpha = 0.0;
      const StackCheck r = check_stack(k, mask, 1, 31);
      CHECK(r.worst() < kTol);
      CHECK(r.bq > 0.0);  // compared, not skipped
      worst = std::max(worst, r.worst());
    }
    SECTION("W_O, head mean, shaped attention, mask " + mask) {
      k.norm = NormType::none;
      k.pos = NormPosition::post;
      k.alpha = 0.0;
      k.dv = 2;
      k.head_mean = true;
      k.shape = AttentionShape{0.8, 0.3, 0.5};  // rows no longer sum to 1: b_V acts apart from b_O
      const StackCheck r = check_stack(k, mask, 1, 32);
      CHECK(r.worst() < kTol);
      worst = std::max(worst, r.worst());
    }
    SECTION("GPT-2 block (pre-LN, W_O, MLP gelu_tanh with biases), 2 blocks, mask " + mask) {
      k.pos = NormPosition::pre;
      k.alpha = 1.0;
      k.dv = 2;
      k.m = 6;
      k.act = MlpActivation::gelu_tanh;
      const StackCheck r = check_stack(k, mask, 2, 33);
      CHECK(r.worst() < kTol);
      worst = std::max(worst, r.worst());
    }
  }
  WARN("attention biases: largest relative error against FD " << worst);
  // The biases act in the forward pass (transformer_block): b_O alone changes X(1).
  Case k;
  k.attn_bias = true;
  k.norm = NormType::none;
  k.pos = NormPosition::post;
  k.alpha = 0.0;
  RandomStream rng(34, 0);
  Fixture f(k, backward_test_mask("complete", k.N));
  std::vector<LayerWeights> ws{random_weights(k, rng)};
  const Matrix X0 = gaussian(k.N, k.d, rng), C = gaussian(k.N, k.d, rng);
  LayerWeights plain = ws[0];  // the same weights without b_O: the forward differs
  plain.o_bias = RowVector::Zero(k.d);
  std::vector<LayerWeights> wp{plain};
  CHECK(rel_err(f.forward(X0, wp), f.forward(X0, ws)) > 1e-3);
}

TEST_CASE("shaped attention a softmax + b I - c C and gap removal A - C against FD", "[backward][variants]") {
  double worst = 0.0;
  for (const std::string mask : {"complete", "causal", "window", "custom"})
    for (const AttentionShape shape : {AttentionShape{1.3, 0.4, 0.7}, AttentionShape{1.0, 0.0, 1.0}})
      for (const bool usa : {false, true}) {
        Case k;
        k.norm = NormType::none;
        k.pos = NormPosition::post;
        k.alpha = 0.0;
        k.dv = 2;
        k.shape = shape;
        k.usa = usa;
        if (usa) k.d_qk = 8.0;
        const StackCheck r = check_stack(k, mask, 1, 300);
        INFO("mask " << mask << " shape " << shape.a << " " << shape.b << " " << shape.c << " usa " << usa);
        CHECK(r.worst() < kTol);
        worst = std::max(worst, r.worst());
      }
  for (const NormPosition pos : {NormPosition::post, NormPosition::pre, NormPosition::peri, NormPosition::ngpt}) {
    Case k;  // 3 blocks with an MLP, layernorm, residual
    k.pos = pos;
    k.m = 5;
    k.shape = AttentionShape{0.9, 0.5, 0.8};
    const StackCheck r = check_stack(k, "causal", 3, 301);
    INFO("stack " << pos_name(pos));
    CHECK(r.worst() < kTol);
    worst = std::max(worst, r.worst());
  }
  WARN("shaped attention: largest relative error against FD " << worst);
  // The comparison can fail: the adjoint of softmax attention against the shaped forward.
  Case k;
  k.shape = AttentionShape{1.3, 0.4, 0.7};
  Case wrong = k;
  wrong.shape = AttentionShape{};
  CHECK(check_stack(k, "causal", 1, 300, &wrong).worst() > kTol);
}

TEST_CASE("shaped attention: C is the uniform attention over the mask, masked entries stay 0", "[backward][variants]") {
  const MaskMatrix mask = backward_test_mask("custom", 5);
  Matrix A = Matrix::Zero(5, 5);  // A = 0: the result is b I - c C alone
  shape_attention(A, mask, AttentionShape{2.0, 0.25, 1.0});
  for (int i = 0; i < 5; ++i) {
    const double n = static_cast<double>(mask.row(i).count());
    for (int j = 0; j < 5; ++j) {
      const double want = (mask(i, j) ? -1.0 / n : 0.0) + (i == j ? 0.25 : 0.0);
      CHECK(A(i, j) == Approx(want).epsilon(1e-15));
      if (!mask(i, j)) CHECK(A(i, j) == 0.0);
    }
    // Gap removal: rows of A - C sum to 0 for a row-stochastic A.
  }
  Matrix S = Matrix::Ones(5, 5);
  masked_softmax(S, mask);
  shape_attention(S, mask, AttentionShape{1.0, 0.0, 1.0});
  CHECK(S.rowwise().sum().cwiseAbs().maxCoeff() < 1e-15);
}

TEST_CASE("additive logit biases (ALiBi, decay) against FD, and the adjoint without the bias fails",
          "[backward][variants]") {
  double worst = 0.0;
  const LogitBias alibi{LogitBiasKind::alibi, 1.0}, decay{LogitBiasKind::decay, 0.6}, file{LogitBiasKind::file, 1.0};
  for (const std::string mask : {"complete", "causal", "window", "custom"})
    for (const LogitBias bias : {alibi, decay, file})
      for (const bool usa : {false, true}) {
        Case k;
        k.norm = NormType::none;
        k.pos = NormPosition::post;
        k.alpha = 0.0;
        k.dv = 2;
        k.logit_bias = bias;
        k.usa = usa;
        if (usa) k.d_qk = 8.0;
        const StackCheck r = check_stack(k, mask, 1, 310);
        INFO("mask " << mask << " kind " << static_cast<int>(bias.kind) << " usa " << usa);
        CHECK(r.worst() < kTol);
        worst = std::max(worst, r.worst());
      }
  for (const NormPosition pos : {NormPosition::post, NormPosition::pre, NormPosition::peri, NormPosition::ngpt})
    for (const LogitBias bias : {alibi, decay, file}) {
      Case k;  // 3 blocks with an MLP, layernorm, residual, 2 heads (two ALiBi slopes)
      k.pos = pos;
      k.m = 5;
      k.logit_bias = bias;
      const StackCheck r = check_stack(k, "causal", 3, 311);
      INFO("stack " << pos_name(pos) << " kind " << static_cast<int>(bias.kind));
      CHECK(r.worst() < kTol);
      worst = std::max(worst, r.worst());
    }
  WARN("logit biases: largest relative error against FD " << worst);
  // The comparison can fail: the adjoint of the unbiased attention against the biased forward.
  for (const LogitBias bias : {alibi, decay, file}) {
    Case k;
    k.logit_bias = bias;
    Case wrong = k;
    wrong.logit_bias = LogitBias{};
    CHECK(check_stack(k, "causal", 1, 310, &wrong).worst() > kTol);
  }
}

TEST_CASE("logit biases: B_ij = -m_h |i - j|, slopes 2^(-8h/H), masked entries exactly 0", "[backward][variants]") {
  const int N = 5;
  for (const std::size_t H : {1u, 2u, 8u})
    for (std::size_t h = 0; h < H; ++h) {
      Matrix B = Matrix::Zero(N, N);
      add_logit_bias(B, LogitBias{LogitBiasKind::alibi, 1.0}, h, H);
      const double m = std::pow(2.0, -8.0 * static_cast<double>(h + 1) / static_cast<double>(H));
      for (int i = 0; i < N; ++i)
        for (int j = 0; j < N; ++j) CHECK(B(i, j) == Approx(-m * std::abs(i - j)).epsilon(1e-15));
    }
  Matrix B = Matrix::Zero(N, N);
  add_logit_bias(B, LogitBias{LogitBiasKind::decay, 0.3}, 0, 1);
  CHECK(B(4, 1) == Approx(3.0 * std::log(0.3)).epsilon(1e-15));
  CHECK(B(1, 4) == B(4, 1));
  CHECK(B(2, 2) == 0.0);
  // Decay on zero logits: row i of softmax is gamma^(i-j) / sum_k gamma^(i-k) on the allowed entries;
  // forbidden entries exactly 0.
  for (const std::string type : {"causal", "custom", "window"}) {
    const MaskMatrix mask = backward_test_mask(type, N);
    Matrix A = Matrix::Zero(N, N);
    add_logit_bias(A, LogitBias{LogitBiasKind::decay, 0.5}, 0, 1);
    masked_softmax(A, mask);
    for (int i = 0; i < N; ++i) {
      double z = 0.0;
      for (int j = 0; j < N; ++j)
        if (mask(i, j)) z += std::pow(0.5, std::abs(i - j));
      for (int j = 0; j < N; ++j) {
        if (!mask(i, j))
          CHECK(A(i, j) == 0.0);
        else
          CHECK(A(i, j) == Approx(std::pow(0.5, std::abs(i - j)) / z).epsilon(1e-14));
      }
    }
  }
}

TEST_CASE("logit bias keys: stored only when set, gamma above 0 and at most 1, refusals name the key",
          "[keys][variants]") {
  CHECK(!make_config({}).attention.logit_bias.active());
  CHECK(make_config({}).to_ini().find("logit_bias") == std::string::npos);
  CHECK(make_config({}).to_ini().find("\ndecay =") == std::string::npos);
  const Config c = make_config({{"attention.logit_bias", "decay"}, {"attention.decay", "0.25"}});
  CHECK(c.attention.logit_bias.kind == LogitBiasKind::decay);
  CHECK(c.attention.logit_bias.gamma == 0.25);
  CHECK(c.to_ini().find("decay = 0.25") != std::string::npos);
  CHECK(make_config({{"attention.logit_bias", "alibi"}}).attention.logit_bias.kind == LogitBiasKind::alibi);
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"attention.decay", "0"}, {"attention.decay", "1.5"}, {"attention.logit_bias", "rope"}}) {
    std::map<std::string, std::string> k = {{"attention.logit_bias", "decay"}, {key, value}};
    if (key == "attention.logit_bias") k[key] = value;
    try {
      make_config(k);
      FAIL("accepted " << key << " = " << value);
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find(key) != std::string::npos);
    }
  }
  try {  // gamma without decay
    make_config({{"attention.decay", "0.5"}});
    FAIL("accepted attention.decay without decay");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("attention.decay") != std::string::npos);
  }
}

TEST_CASE("QK-normalisation s q/|q|, s k/|k|, logits sqrt(d_k) Q K^T against FD, the plain adjoint fails",
          "[backward][variants]") {
  double worst = 0.0;
  for (const std::string mask : {"complete", "causal", "window", "custom"})
    for (const double scale : {1.0, 1.7})
      for (const bool attn_bias : {false, true}) {
        Case k;
        k.norm = NormType::none;
        k.pos = NormPosition::post;
        k.alpha = 0.0;
        k.dv = 2;
        k.qk_norm = true;
        k.qk_scale = scale;
        k.attn_bias = attn_bias;  // b_Q, b_K inside the normalised rows
        const StackCheck r = check_stack(k, mask, 1, 320);
        INFO("mask " << mask << " s " << scale << " attention biases " << attn_bias << ": q " << r.q << " k " << r.k
                     << " bq " << r.bq << " bk " << r.bk << " x " << r.x);
        CHECK(r.worst() < kTol);
        worst = std::max(worst, r.worst());
      }
  for (const NormPosition pos : {NormPosition::post, NormPosition::pre, NormPosition::peri, NormPosition::ngpt}) {
    Case k;  // 3 blocks with an MLP, layernorm, residual, ALiBi beside
    k.pos = pos;
    k.m = 5;
    k.qk_norm = true;
    k.qk_scale = 1.3;
    k.logit_bias = LogitBias{LogitBiasKind::alibi, 1.0};
    const StackCheck r = check_stack(k, "causal", 3, 321);
    INFO("stack " << pos_name(pos));
    CHECK(r.worst() < kTol);
    worst = std::max(worst, r.worst());
  }
  WARN("QK-normalisation: largest relative error against FD " << worst);
  // The comparison can fail: the adjoint of plain attention against the QK-normalised forward.
  Case k;
  k.qk_norm = true;
  Case wrong = k;
  wrong.qk_norm = false;
  CHECK(check_stack(k, "causal", 1, 320, &wrong).worst() > kTol);
}

TEST_CASE("QK-normalisation keys: stored only when set, refusals name the key", "[keys][variants]") {
  CHECK(!make_config({}).attention.qk_norm);
  CHECK(make_config({}).to_ini().find("qk_") == std::string::npos);
  const Config c = make_config({{"attention.qk_norm", "true"}, {"attention.qk_scale", "2"}});
  CHECK(c.attention.qk_norm);
  CHECK(c.attention.qk_scale == 2.0);
  CHECK(c.to_ini().find("qk_scale = 2") != std::string::npos);
  const auto refused = [](const std::map<std::string, std::string>& k, const std::string& key) {
    try {
      make_config(k);
    } catch (const UsageError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(key) != std::string::npos);
      return true;
    }
    return false;
  };
  CHECK(refused({{"attention.qk_scale", "2"}}, "attention.qk_scale"));
  CHECK(refused({{"attention.qk_norm", "true"}, {"model.d_qk", "2"}}, "attention.qk_norm"));
  CHECK(refused({{"attention.qk_norm", "true"}, {"model.beta", "2"}}, "attention.qk_norm"));
  CHECK(refused({{"attention.qk_norm", "true"}, {"attention.kind", "random_markov"}}, "attention.qk_norm"));
}

TEST_CASE("random-Markov attention A = softmax(G) against FD: W_Q and W_K get exactly 0, fresh G fails",
          "[backward][particles]") {
  double worst = 0.0, wrong_least = 1e300;
  std::uint64_t seed = 900;
  for (const std::string mask : {"complete", "causal", "window", "custom"})
    for (const NormPosition pos : {NormPosition::post, NormPosition::pre, NormPosition::peri, NormPosition::ngpt}) {
      Case k;
      k.random_markov = true;
      k.pos = pos;
      k.norm = pos == NormPosition::ngpt ? NormType::sphere : NormType::layernorm;
      k.m = pos == NormPosition::post ? 0 : 5;
      k.dv = 3;
      k.attn_bias = mask == "custom";
      const StackCheck r = check_stack(k, mask, 3, ++seed);
      INFO(mask << " " << pos_name(pos) << ": " << stack_text(r));
      CHECK(r.worst() < kParticleTol);
      CHECK(r.q == 0.0);  // the FD gradients of W_Q, W_K are exactly 0 (A ignores them) and so are ours
      CHECK(r.k == 0.0);
      worst = std::max(worst, r.worst());
      // The reverse pass with fresh draws of G (not the forward's) must fail.
      const StackCheck bad = check_stack(k, mask, 3, seed, nullptr, [&](std::vector<LayerWeights>& wa) {
        RandomStream fresh(seed + 5000, 1);
        for (auto& w : wa)
          for (auto& G : w.logits) fresh.fill_normal(G);
      });
      INFO("fresh G: " << stack_text(bad));
      CHECK(bad.x > 1e-2);
      wrong_least = std::min(wrong_least, bad.x);
    }
  WARN("random_markov: worst relative error against FD " << worst << "; fresh G misses dL/dX(0) by at least "
                                                          << wrong_least);
}
