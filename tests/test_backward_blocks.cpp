// The block in every placement against finite differences: 3-block stacks of every placement x
// normalisation, dropout, the shared normalisation, skip and branch gains, the MLP's own branch
// weight, LayerNorm depth scaling, settings per layer range (Mix-LN); the keys of these variants.
#include "backward_support.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

TEST_CASE("3-block stack in every placement x normalisation against FD", "[backward]") {
  double worst = 0.0;
  for (const NormPosition pos : {NormPosition::post, NormPosition::pre, NormPosition::peri, NormPosition::ngpt})
    for (const NormType t : {NormType::none, NormType::sphere, NormType::projection, NormType::layernorm,
                             NormType::rmsnorm, NormType::dyt, NormType::derf})
      for (const double alpha : {0.0, 0.6}) {
        Case k;
        k.pos = pos;
        k.norm = t;
        k.alpha = alpha;
        k.m = 5;
        k.dv = 3;
        k.act = pos == NormPosition::peri ? MlpActivation::gelu_tanh : MlpActivation::gelu;
        const StackCheck r = check_stack(k, pos == NormPosition::pre ? "causal" : "complete", 3, 100);
        INFO(pos_name(pos) << " x " << norm_name(t) << " alpha " << alpha << ": x " << r.x << " q " << r.q
                           << " k " << r.k << " v " << r.v << " o " << r.o << " gain " << r.gain << " bias "
                           << r.bias << " W_in " << r.w_in << " W_out " << r.w_out);
        // dyt and derf: peri without residual passes W_Q's gradient through several tanh-like maps, where
        // the central differences' O(h^2) error measured 2.9e-6 (q); the forward-mode grid's dot-product
        // test checks the same stacks to rounding (test_forward_mode.cpp).
        const bool elementwise = t == NormType::dyt || t == NormType::derf;
        CHECK(r.worst() < (elementwise ? 1e-5 : kTol));
        worst = std::max(worst, r.worst());
      }
  WARN("3-block stacks: largest relative error against FD " << worst);
  CHECK(worst > 0.0);  // the comparison measured something
}

TEST_CASE("dropout: the adjoint draws the forward's masks (3-block stacks in every placement against FD)",
          "[backward][dropout]") {
  // Dropout's draws do not depend on the values (one uniform per entry), so the forward from a
  // fixed stream is a smooth function of X(0) and the weights: FD applies. The reverse pass gets
  // each block's stream as the forward entered it; without the masks it must fail.
  double worst = 0.0;
  for (const NormPosition pos : {NormPosition::post, NormPosition::pre, NormPosition::peri, NormPosition::ngpt}) {
    Case k;
    k.pos = pos;
    k.norm = pos == NormPosition::ngpt ? NormType::sphere : NormType::layernorm;
    k.m = 5;
    k.dv = 3;
    RandomStream rng(300, 0);
    Fixture f(k, backward_test_mask(pos == NormPosition::pre ? "causal" : "complete", k.N));
    std::vector<LayerWeights> ws;
    for (int t = 0; t < 3; ++t) ws.push_back(random_weights(k, rng));
    Matrix X0 = gaussian(k.N, k.d, rng);
    const Matrix C = gaussian(k.N, k.d, rng);
    const RandomStream start(31, 2, kDropoutStream);
    std::vector<Matrix> inputs;
    std::vector<RandomStream> streams;
    const auto forward = [&](bool record) {
      RandomStream r = start;
      const Dropout drop{0.3, 0.25, &r};
      BlockParams p = f.p;
      p.layer.dropout = &drop;
      Matrix X = X0, next;
      BlockWorkspace bws(k.N, k.d, k.dk);
      for (const auto& w : ws) {
        if (record) {
          inputs.push_back(X);
          streams.push_back(r);
        }
        transformer_block(X, w, p, bws, next);
        X = next;
      }
      return X;
    };
    const auto loss = [&] { return forward(false).cwiseProduct(C).sum(); };
    forward(true);
    const auto reverse = [&](bool with_masks, BlockGrads& g0) {
      RandomStream unused = start;
      const Dropout drop{0.3, 0.25, &unused};
      BlockParams p = f.p;
      if (with_masks) p.layer.dropout = &drop;
      Matrix dX = C;
      BlockGrads g;
      for (int t = 2; t >= 0; --t) {
        RandomStream r = streams[static_cast<std::size_t>(t)];
        block_backward(inputs[static_cast<std::size_t>(t)], ws[static_cast<std::size_t>(t)], p, dX, g,
                       with_masks ? &r : nullptr);
        dX = g.dX;
        if (t == 0) g0 = g;
      }
      return dX;
    };
    BlockGrads g0, plain;
    const Matrix dX0 = reverse(true, g0);
    const Matrix fd_x = fd_gradient(X0, loss);
    const double errs[] = {rel_err(dX0, fd_x), rel_err(g0.dq[0], fd_gradient(ws[0].q[0], loss)),
                           rel_err(g0.dv[1], fd_gradient(ws[0].v[1], loss)),
                           rel_err(g0.dout[0], fd_gradient(ws[0].o[0], loss)),
                           rel_err(g0.mlp.d_in, fd_gradient(ws[0].mlp_in, loss))};
    INFO(pos_name(pos) << ": x " << errs[0] << " q " << errs[1] << " v " << errs[2] << " o " << errs[3] << " W_in "
                       << errs[4]);
    for (const double e : errs) CHECK(e < kTol);
    worst = std::max(worst, *std::max_element(std::begin(errs), std::end(errs)));
    CHECK(rel_err(reverse(false, plain), fd_x) > 1e-2);  // the adjoint without the masks is wrong
  }
  WARN("dropout, 3-block stacks: largest relative error against FD " << worst);
}

TEST_CASE("shared normalisation (norm.params = config): the gradient of the shared gain is the sum over slots",
          "[backward]") {
  Case k;
  k.norms_from_file = false;
  k.pos = NormPosition::peri;
  k.m = 4;
  RandomStream rng(14, 0);
  Fixture f(k, backward_test_mask("complete", k.N));
  const LayerWeights w = random_weights(k, rng);
  const Matrix X0 = gaussian(k.N, k.d, rng), C = gaussian(k.N, k.d, rng);
  BlockGrads g;
  block_backward(X0, w, f.p, C, g);
  const auto loss = [&] { return f.forward(X0, {w}).cwiseProduct(C).sum(); };
  const Matrix fg = fd_gradient_row(f.shared.gain, loss), fb = fd_gradient_row(f.shared.bias, loss);
  CHECK(rel_err(g.dgain[0] + g.dgain[1] + g.dgain[2] + g.dgain[3], fg) < kTol);
  CHECK(rel_err(g.dbias[0] + g.dbias[1] + g.dbias[2] + g.dbias[3], fb) < kTol);
}

// --- Variants (docs/science/gradients.md, "Variants") ---

TEST_CASE("skip and branch gains a X + b F(X): 3-block stacks in post, pre, peri against FD", "[backward][variants]") {
  double worst = 0.0;
  for (const NormPosition pos : {NormPosition::post, NormPosition::pre, NormPosition::peri})
    for (const NormType t : {NormType::none, NormType::layernorm, NormType::rmsnorm})
      for (const double skip : {0.8, 1.7, 0.0}) {  // 0.8 = sqrt(1 - 0.6^2): Cowsik's mixing with b = 0.6
        Case k;
        k.pos = pos;
        k.norm = t;
        k.alpha = 0.6;
        k.skip = skip;
        k.m = 5;
        k.dv = 3;
        const StackCheck r = check_stack(k, pos == NormPosition::pre ? "causal" : "complete", 3, 200);
        INFO(pos_name(pos) << " x " << norm_name(t) << " skip " << skip << ": x " << r.x << " q " << r.q << " v "
                           << r.v << " gain " << r.gain << " W_in " << r.w_in);
        CHECK(r.worst() < kTol);
        worst = std::max(worst, r.worst());
      }
  WARN("skip gain stacks: largest relative error against FD " << worst);
  // The comparison can fail: the adjoint of the plain residual (a = 1) against the skip forward.
  Case k;
  k.skip = 0.8;
  k.alpha = 0.6;
  k.m = 5;
  Case wrong = k;
  wrong.skip = 1.0;
  CHECK(check_stack(k, "complete", 3, 200, &wrong).x > kTol);
}

TEST_CASE("MLP branch weight alpha_M and skip a_M apart from the attention's: stacks against FD", "[backward][variants]") {
  double worst = 0.0;
  for (const NormPosition pos : {NormPosition::post, NormPosition::pre, NormPosition::peri, NormPosition::ngpt})
    for (const double a_m : {0.3, 0.0, 1.4}) {
      Case k;
      k.pos = pos;
      k.norm = pos == NormPosition::ngpt ? NormType::rmsnorm : NormType::layernorm;
      k.alpha = 0.6;
      k.m = 5;
      k.mlp_alpha = a_m;
      if (pos != NormPosition::ngpt && a_m != 0.0) k.mlp_skip = std::sqrt(std::abs(1.0 - a_m * a_m));
      const StackCheck r = check_stack(k, pos == NormPosition::pre ? "causal" : "complete", 3, 210);
      INFO(pos_name(pos) << " alpha_M " << a_m << ": x " << r.x << " q " << r.q << " W_in " << r.w_in);
      CHECK(r.worst() < kTol);
      worst = std::max(worst, r.worst());
    }
  WARN("MLP branch weight stacks: largest relative error against FD " << worst);
  // The comparison can fail: the adjoint with the attention's alpha for the MLP, against alpha_M's forward.
  Case k;
  k.alpha = 0.6;
  k.m = 5;
  k.mlp_alpha = 0.3;
  k.mlp_skip = 0.9;
  Case wrong = k;
  wrong.mlp_alpha.reset();
  wrong.mlp_skip.reset();
  CHECK(check_stack(k, "complete", 3, 210, &wrong).x > kTol);
}

TEST_CASE("residual.mlp_alpha: resolved values and refusals naming the key", "[keys][variants]") {
  std::map<std::string, std::string> keys = {{"model.tokens", "4"}, {"model.dim", "3"}, {"residual.alpha", "0.6"},
                                             {"mlp.width", "5"}};
  CHECK_FALSE(make_config(keys).residual_mlp_alpha.has_value());  // auto: the attention's alpha
  keys["residual.mlp_alpha"] = "0.8";
  CHECK(*make_config(keys).residual_mlp_alpha == 0.8);
  CHECK_FALSE(make_config(keys).residual_mlp_skip.has_value());
  keys["residual.mixing"] = "cowsik";
  const Config c = make_config(keys);
  CHECK(*c.residual_mlp_skip == Approx(0.6).epsilon(1e-15));  // sqrt(1 - 0.8^2)
  CHECK(c.residual_skip == Approx(0.8).epsilon(1e-15));       // sqrt(1 - 0.6^2), the attention's
  keys["residual.mlp_alpha"] = "1.5";
  const auto message = [&] {
    try {
      make_config(keys);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(message(), Catch::Matchers::Contains("residual.mlp_alpha") && Catch::Matchers::Contains("<= 1"));
  keys.erase("residual.mixing");
  keys["mlp.width"] = "0";
  CHECK_THAT(message(), Catch::Matchers::Contains("residual.mlp_alpha") && Catch::Matchers::Contains("mlp.width"));
}

TEST_CASE("variant keys: resolved values, conflicts and refusals are usage errors naming the key", "[keys][variants]") {
  using Keys = std::map<std::string, std::string>;
  CHECK(make_config({}).residual_skip == 1.0);
  CHECK(make_config({}).weights.branch_gain == 1.0);
  CHECK(!make_config({}).attention.shape.active());
  CHECK(make_config({}).to_ini().find("skip") == std::string::npos);  // not stored at the default
  CHECK(make_config({{"residual.alpha", "1"}, {"residual.skip", "0.5"}}).to_ini().find("skip = 0.5") !=
        std::string::npos);
  CHECK(make_config({{"residual.alpha", "1"}, {"residual.skip", "0.5"}}).residual_skip == 0.5);
  CHECK(make_config({{"residual.mixing", "deepnorm"}, {"residual.alpha", "1"}, {"weights.branch_gain", "0.5"}})
            .weights.branch_gain == 0.5);
  const auto refused = [](const Keys& k, const std::string& key) {
    try {
      make_config(k);
    } catch (const UsageError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(key) != std::string::npos);
      return true;
    }
    return false;
  };
  CHECK(refused({{"residual.skip", "0.5"}}, "residual.skip"));  // no residual
  CHECK(refused({{"residual.mixing", "cowsik"}}, "residual.mixing"));
  CHECK(refused({{"residual.mixing", "cowsik"}, {"residual.alpha", "1.5"}}, "residual.mixing"));
  CHECK(refused({{"residual.mixing", "cowsik"}, {"residual.alpha", "0.5"}, {"residual.skip", "1"}}, "residual.mixing"));
  CHECK(refused({{"residual.mixing", "deepnorm"}, {"residual.alpha", "1"}, {"norm.position", "pre"}}, "deepnorm"));
  CHECK(refused({{"residual.skip", "0.5"}, {"residual.alpha", "1"}, {"norm.position", "ngpt"}}, "residual.skip"));
  CHECK(refused({{"residual.mixing", "sideways"}}, "residual.mixing"));
  CHECK(refused({{"attention.shape_b", "x"}}, "attention.shape_b"));
  CHECK(refused({{"weights.branch_gain", "-1"}}, "weights.branch_gain"));
}

TEST_CASE("LayerNorm scaling 1/sqrt(l) (pre-LN) against FD, and the adjoint without it fails", "[backward][variants]") {
  double worst = 0.0;
  for (const NormType t : {NormType::none, NormType::layernorm, NormType::rmsnorm, NormType::sphere})
    for (const double alpha : {0.7, 0.0}) {
      Case k;  // 3 blocks (l = 1, 2, 3), MLP, W_O, per-slot gains and biases
      k.pos = NormPosition::pre;
      k.norm = t;
      k.alpha = alpha;
      k.m = 5;
      k.dv = 3;
      k.ln_depth_scaling = true;
      const StackCheck r = check_stack(k, "causal", 3, 330);
      INFO(norm_name(t) << " alpha " << alpha << ": x " << r.x << " q " << r.q << " gain " << r.gain << " W_in "
                        << r.w_in);
      CHECK(r.worst() < kTol);
      worst = std::max(worst, r.worst());
    }
  WARN("LayerNorm scaling: largest relative error against FD " << worst);
  CHECK(at_layer(BlockParams{}, 3).layer.norm_scale == 1.0);  // off: every block as given
  BlockParams on;
  on.norm_depth_scaling = true;
  CHECK(at_layer(on, 0).layer.norm_scale == 1.0);
  CHECK(at_layer(on, 3).layer.norm_scale == 0.5);  // layer l = 4
  // The comparison can fail: the plain pre-LN adjoint against the scaled forward.
  Case k;
  k.m = 5;
  k.ln_depth_scaling = true;
  Case wrong = k;
  wrong.ln_depth_scaling = false;
  CHECK(check_stack(k, "causal", 3, 330, &wrong).x > kTol);
}

TEST_CASE("depth scaling keys: stored only when set, refusals name the key", "[keys][variants]") {
  CHECK(make_config({}).to_ini().find("depth_scaling") == std::string::npos);
  const Config c = make_config({{"residual.alpha", "1"}, {"residual.depth_scaling", "inv_sqrt_depth"},
                                {"model.layers", "4"}, {"norm.position", "pre"},
                                {"norm.depth_scaling", "inv_sqrt_layer"}});
  CHECK(c.residual_depth_scaling == ResidualDepthScaling::inv_sqrt_depth);
  CHECK(c.norm_depth_scaling == NormDepthScaling::inv_sqrt_layer);
  CHECK(c.residual_alpha == 1.0);  // as given (and stored); the layer's branch gain is alpha / sqrt(L)
  CHECK(layer_params(c, nullptr, nullptr).alpha == 0.5);
  CHECK(layer_params(make_config({{"residual.alpha", "1"}}), nullptr, nullptr).alpha == 1.0);
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
  CHECK(refused({{"residual.depth_scaling", "inv_sqrt_depth"}}, "residual.depth_scaling"));  // no residual
  CHECK(refused({{"residual.depth_scaling", "inv_sqrt_depth"}, {"residual.alpha", "0.6"},
                 {"residual.mixing", "cowsik"}}, "residual.depth_scaling"));
  CHECK(refused({{"norm.depth_scaling", "inv_sqrt_layer"}}, "norm.depth_scaling"));  // post
  CHECK(refused({{"norm.depth_scaling", "sqrt"}, {"norm.position", "pre"}}, "norm.depth_scaling"));
}

// --- Settings per layer range (model.layer_overrides; docs/science/gradients.md) ---

namespace {

// The kernel's table for one override of blocks from..to with the settings of `o` (its norm.type,
// position, alpha, skip, d_QK, activation) on the normalisation of Fixture (gains, biases).
LayerSettings table_of(const Case& base, const Case& o, int from, int to) {
  ModelSpec spec;
  spec.model.dim = base.d;
  spec.model.layers = 4;
  spec.norm.type = base.norm;
  spec.norm.eps = 1e-5;
  const RowVector g = RowVector::LinSpaced(base.d, 0.8, 1.3), b = RowVector::LinSpaced(base.d, -0.2, 0.3);
  spec.norm.gain.assign(g.data(), g.data() + g.size());
  spec.norm.bias.assign(b.data(), b.data() + b.size());
  ModelSpec range = spec;  // the range's configuration: the base with o's settings
  range.norm.position = o.pos;
  range.norm.type = o.norm;
  range.residual_alpha = o.alpha;
  range.residual_skip = o.skip;
  range.model.d_qk = o.d_qk;
  range.mlp.activation = o.act;
  LayerOverride lo;
  lo.from = from, lo.to = to;
  lo.spec = std::make_shared<const ModelSpec>(range);
  spec.layer_overrides.push_back(lo);
  return layer_settings(spec);
}

}  // namespace

TEST_CASE("Mix-LN forward: the overridden stack equals the composition of post-LN and pre-LN blocks by hand",
          "[backward][layers]") {
  for (const bool other_settings : {false, true}) {
    RandomStream rng(410, 0);
    Case pre;  // the base: pre-LN; blocks 0, 1 post-LN (and with other_settings rmsnorm, alpha, d_QK, relu)
    pre.m = 5;
    pre.dv = 3;
    pre.norms_from_file = false;  // the block reads its N from the settings
    Case post = pre;
    post.pos = NormPosition::post;
    if (other_settings) {
      post.norm = NormType::rmsnorm;
      post.alpha = 0.4;
      post.d_qk = 3.5;
      post.act = MlpActivation::relu;
    }
    const MaskMatrix mask = backward_test_mask("causal", pre.N);
    Fixture mixed(pre, mask), hand_post(post, mask), hand_pre(pre, mask);
    const LayerSettings table = table_of(pre, post, 0, 1);
    mixed.p.per_layer = &table;
    std::vector<LayerWeights> ws;
    for (int t = 0; t < 4; ++t) ws.push_back(random_weights(pre, rng));
    const Matrix X0 = gaussian(pre.N, pre.d, rng);
    const Matrix Y = mixed.forward(X0, ws);
    const Matrix by_hand = hand_pre.forward(hand_post.forward(X0, {ws[0], ws[1]}), {ws[2], ws[3]});
    INFO("other settings " << other_settings);
    CHECK((Y - by_hand).cwiseAbs().maxCoeff() == 0.0);  // the same operations: bitwise
    // Not trivially so: the plain pre-LN stack differs.
    CHECK(rel_err(hand_pre.forward(X0, ws), Y) > 1e-3);
    // Blocks outside the ranges keep the base; at_layer gives each block its settings.
    CHECK(at_layer(mixed.p, 1).position == NormPosition::post);
    CHECK(at_layer(mixed.p, 2).position == NormPosition::pre);
    CHECK(at_layer(mixed.p, 2).layer.norm == &mixed.shared);
  }
}

TEST_CASE("Mix-LN reverse pass against FD on 4-block stacks, and the adjoint that ignores the overrides fails",
          "[backward][layers]") {
  double worst = 0.0, ignored = 1e300;
  struct Mix {
    NormPosition base, first;
    NormType first_norm;
    double first_alpha, first_d_qk;
    MlpActivation first_act;
  };
  const std::vector<Mix> mixes = {
      {NormPosition::pre, NormPosition::post, NormType::layernorm, 0.7, 2.0, MlpActivation::gelu},  // Mix-LN
      {NormPosition::post, NormPosition::pre, NormType::rmsnorm, 0.5, 3.0, MlpActivation::gelu_tanh},
      {NormPosition::pre, NormPosition::peri, NormType::sphere, 1.2, 1.5, MlpActivation::gelu}};
  for (const Mix& mx : mixes) {
    RandomStream rng(420, 0);
    Case k;
    k.pos = mx.base;
    k.m = 5;
    k.dv = 3;
    k.norms_from_file = false;
    Case first = k;
    first.pos = mx.first;
    first.norm = mx.first_norm;
    first.alpha = mx.first_alpha;
    first.d_qk = mx.first_d_qk;
    first.act = mx.first_act;
    const MaskMatrix mask = backward_test_mask("causal", k.N);
    Fixture f(k, mask);
    const LayerSettings table = table_of(k, first, 0, 1);  // blocks 0, 1 of 4
    f.p.per_layer = &table;
    std::vector<LayerWeights> ws;
    for (int t = 0; t < 4; ++t) ws.push_back(random_weights(k, rng));
    Matrix X0 = gaussian(k.N, k.d, rng);
    const Matrix C = gaussian(k.N, k.d, rng);
    const auto loss = [&] { return f.forward(X0, ws).cwiseProduct(C).sum(); };
    std::vector<BlockGrads> g(4);
    const std::vector<Matrix> inputs = f.inputs(X0, ws);
    const std::vector<Matrix> dX =
        stack_backward(inputs, ws, f.p, C, [&](int t, const BlockGrads& gt) { g[static_cast<std::size_t>(t)] = gt; });
    const double ex = rel_err(dX[0], fd_gradient(X0, loss));
    double ew = 0.0;
    for (const int t : {0, 1, 3}) {  // an overridden block, the last overridden one, a base block
      const auto ut = static_cast<std::size_t>(t);
      ew = std::max(ew, rel_err(g[ut].dq[0], fd_gradient(ws[ut].q[0], loss)));
      ew = std::max(ew, rel_err(g[ut].dv[1], fd_gradient(ws[ut].v[1], loss)));
      ew = std::max(ew, rel_err(g[ut].mlp.d_in, fd_gradient(ws[ut].mlp_in, loss)));
    }
    INFO("base " << pos_name(mx.base) << ", blocks 0-1 " << pos_name(mx.first) << " " << norm_name(mx.first_norm)
                 << ": dX(0) " << ex << ", weights " << ew);
    CHECK(ex < kTol);
    CHECK(ew < kTol);
    worst = std::max({worst, ex, ew});
    // The comparison can fail: the reverse pass without the overrides (every block the base).
    BlockParams plain = f.p;
    plain.per_layer = nullptr;
    const double wrong = rel_err(stack_backward(inputs, ws, plain, C)[0], fd_gradient(X0, loss));
    CHECK(wrong > kTol);
    ignored = std::min(ignored, wrong);
  }
  WARN("Mix-LN stacks: largest relative error against FD " << worst << "; overrides ignored in the backward: "
                                                           << ignored);
}

TEST_CASE("engine: Mix-LN grad_x_norm against FD of the engine's loss, and segments replay it exactly",
          "[backward][layers]") {
  RandomStream rng(430, 0);
  EngineRun e;
  e.X0 = gaussian(4, 3, rng);
  e.WQ = gaussian(3, 3, rng, 0.7);
  e.keys = {{"model.tokens", "4"},   {"model.dim", "3"},       {"model.layers", "4"},   {"norm.type", "layernorm"},
            {"residual.alpha", "1"}, {"mlp.width", "5"},       {"run.trials", "1"},     {"output.tokens", "all"},
            {"mask.type", "causal"}, {"norm.position", "pre"}, {"output.measures", "grad_x_norm,grad_wq_norm"},
            {"model.layer_overrides", "0-1:norm.position=post; 3:residual.alpha=0.5,mlp.activation=gelu_tanh"}};
  const RunResults r = e.run();
  const Matrix gx = fd_gradient(e.X0, [&] { return e.loss(); });
  const double err = std::abs(EngineRun::value(r, "grad_x_norm", 0) / gx.norm() - 1);
  CHECK(err < kTol);
  // The same stack without the overrides has another gradient (the check can fail).
  auto plain = e;
  plain.keys.erase("model.layer_overrides");
  const double off = std::abs(EngineRun::value(plain.run(), "grad_x_norm", 0) / gx.norm() - 1);
  CHECK(off > kTol);
  WARN("engine Mix-LN: |grad_x_norm / FD - 1| = " << err << " (without the overrides " << off << ")");
  // The reverse pass from checkpoints replays each block with its own settings.
  auto k = e.keys;
  k["run.trials"] = "2";
  k.erase("output.tokens");
  k["model.layers"] = "7";
  k["model.layer_overrides"] = "0-2:norm.position=post; 5-:norm.type=rmsnorm";
  k["output.measures"] = "grad_x_norm,grad_wq_norm,grad_wk_norm,grad_wv_norm,jacobian_log_fro2";
  EngineSetup s = prepare(make_config(k));
  const RunResults stored = run_simulation(s, 1);
  for (const int length : {1, 2, 3}) {
    INFO("segments of " << length);
    s.gradient_segment = length;
    const RunResults seg = run_simulation(s, 2);
    for (std::size_t i = 0; i < seg.token.size(); ++i) CHECK(seg.token[i].cwiseEqual(stored.token[i]).all());
  }
}

TEST_CASE("an override of every block equals the key set globally, bitwise (forward, measures, gradients)",
          "[backward][layers]") {
  const std::map<std::string, std::string> base = {
      {"model.tokens", "5"}, {"model.dim", "4"},       {"model.layers", "3"}, {"norm.type", "layernorm"},
      {"run.trials", "2"},   {"residual.alpha", "1"},  {"mlp.width", "6"},    {"mask.type", "causal"},
      {"norm.bias", "0"},    {"output.measures", "grad_x_norm,grad_wq_norm,jacobian_log_fro2"}};
  const std::vector<std::map<std::string, std::string>> settings = {
      {{"norm.position", "pre"}},
      {{"norm.position", "peri"}, {"norm.type", "rmsnorm"}},
      {{"norm.type", "projection"}},  // max_rank: d - 1 both ways
      {{"residual.alpha", "0.3"}, {"model.d_qk", "2.5"}, {"mlp.activation", "relu"}},
      {{"model.beta", "0.8"}}};
  for (const auto& set : settings) {
    auto global = base, per_layer = base;
    std::string entry;
    for (const auto& [key, value] : set) {
      global[key] = value;
      entry += (entry.empty() ? "" : ",") + key + "=" + value;
    }
    per_layer["model.layer_overrides"] = "0-:" + entry;
    INFO(per_layer["model.layer_overrides"]);
    const EngineSetup a = prepare(make_config(global)), b = prepare(make_config(per_layer));
    CHECK(a.max_rank == b.max_rank);
    const RunResults ra = run_simulation(a, 1), rb = run_simulation(b, 1);
    REQUIRE(ra.token.size() == rb.token.size());
    for (std::size_t i = 0; i < ra.token.size(); ++i) {
      INFO(ra.token_info[i].name);
      CHECK(ra.token[i].cwiseEqual(rb.token[i]).all());
    }
    const Matrix cot = Matrix::Constant(5, 4, 0.3);
    const TrialGradients ga = trial_gradients(a, 1, cot), gb = trial_gradients(b, 1, cot);
    CHECK(ga.output.cwiseEqual(gb.output).all());
    CHECK(ga.dX[0].cwiseEqual(gb.dX[0]).all());
    CHECK(ga.blocks[1].dq[0].cwiseEqual(gb.blocks[1].dq[0]).all());
  }
  // The max_rank of a centring post-LN block counts: projection on blocks 0-1 only, pre elsewhere.
  auto mixed = base;
  mixed["norm.type"] = "projection";
  CHECK(prepare(make_config(mixed)).max_rank == 3);
  mixed["model.layer_overrides"] = "2:norm.position=pre";
  CHECK(prepare(make_config(mixed)).max_rank == 4);
}
