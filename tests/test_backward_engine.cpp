// The engine's gradient measures (the reverse walk over the stack, from stored blocks or from
// checkpoints) against finite differences of the readout loss; the memory of the tape; the random
// streams of a trial.
#include "backward_support.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

TEST_CASE("engine: gradient measures against FD of the readout loss, forward measures against the snapshots",
          "[backward]") {
  RandomStream rng(21, 0);
  EngineRun e;
  e.X0 = gaussian(4, 3, rng);
  e.WQ = gaussian(3, 3, rng, 0.7);
  e.keys = {{"model.tokens", "4"},      {"model.dim", "3"},       {"model.layers", "1"},
            {"norm.type", "layernorm"}, {"norm.position", "pre"}, {"residual.alpha", "1"},
            {"mask.type", "causal"},    {"mlp.width", "5"},       {"run.trials", "1"},
            {"output.tokens", "all"},
            {"output.measures", "cos_mean,gram_q,gram_p,massive_ratio,update_size,grad_x_norm,grad_wq_norm,grad_wk_norm,"
                                "grad_wv_norm,jacobian_log_fro2"}};
  SECTION("one block: ||dL/dX(0)||, ||dL/dW_Q|| against FD; dL/dX(L) = 1 R^T") {
    const RunResults r = e.run();
    const Matrix gx = fd_gradient(e.X0, [&] { return e.loss(); });
    const Matrix gq = fd_gradient(e.WQ, [&] { return e.loss(); });
    CHECK(std::abs(EngineRun::value(r, "grad_x_norm", 0) / gx.norm() - 1) < kTol);
    CHECK(std::abs(EngineRun::value(r, "grad_wq_norm", 0) / gq.norm() - 1) < kTol);
    const Vector R = readout(make_config(e.keys), 0);
    CHECK(EngineRun::value(r, "grad_x_norm", 1) == Approx(2.0 * R.norm()).epsilon(1e-14));  // sqrt(N) ||R||
    CHECK(EngineRun::value(r, "grad_wk_norm", 0) > 0);
    CHECK(EngineRun::value(r, "grad_wv_norm", 0) > 0);
  }
  SECTION("metrics.readout_vector: the loss 1^T X(L) R with the R given; FD of that loss") {
    e.keys["metrics.readout_vector"] = "0.5, -2 1.5";
    const RunResults r = e.run();
    // dL/dX(L) = 1 R^T: sqrt(N) |R| = 2 sqrt(0.25 + 4 + 2.25), by hand (not through readout()).
    CHECK(EngineRun::value(r, "grad_x_norm", 1) == Approx(2.0 * std::sqrt(6.5)).epsilon(1e-14));
    const Vector R = readout(make_config(e.keys), 0);
    CHECK(R(0) == 0.5);
    CHECK(R(1) == -2.0);
    CHECK(R(2) == 1.5);
    const Matrix gx = fd_gradient(e.X0, [&] { return e.loss(); });  // e.loss() reads R through readout()
    CHECK(std::abs(EngineRun::value(r, "grad_x_norm", 0) / gx.norm() - 1) < kTol);
    CHECK_THROWS_WITH(make_config({{"model.dim", "3"}, {"metrics.readout_vector", "1 2"}}),
                      Catch::Matchers::Contains("metrics.readout_vector") && Catch::Matchers::Contains("3 finite"));
    CHECK_THROWS_WITH(make_config({{"model.dim", "2"}, {"metrics.readout_vector", "1 nan"}}),
                      Catch::Matchers::Contains("metrics.readout_vector"));
  }
  SECTION("three blocks: ||dL/dX(0)||, ||d(X(L) R)/dX(0)||_F^2 against FD; the forward measures") {
    e.keys["model.layers"] = "3";
    const RunResults r = e.run();
    const Matrix gx = fd_gradient(e.X0, [&] { return e.loss(); });
    CHECK(std::abs(EngineRun::value(r, "grad_x_norm", 0) / gx.norm() - 1) < kTol);
    // The Jacobian of the N outputs (X(L) R)_i, one FD gradient per output i.
    const Vector R = readout(make_config(e.keys), 0);
    double fro2 = 0.0;
    for (int i = 0; i < 4; ++i)
      fro2 += fd_gradient(e.X0, [&] { return (e.run().snapshots[0].back() * R)(i); }).squaredNorm();
    CHECK(std::abs(EngineRun::value(r, "jacobian_log_fro2", 0) - std::log(fro2)) < kTol);
    CHECK(EngineRun::value(r, "jacobian_log_fro2", 3) == Approx(std::log(4 * R.squaredNorm())).epsilon(1e-14));  // N ||R||^2
    for (int t = 0; t <= 3; ++t) {
      const Matrix& X = r.snapshots[0][static_cast<std::size_t>(t)];
      CHECK(EngineRun::value(r, "cos_mean", t) == cos_mean(X));
      CHECK(EngineRun::value(r, "gram_q", t) == gram_q(X));
      CHECK(EngineRun::value(r, "gram_p", t) == gram_p(X));
      CHECK(EngineRun::value(r, "massive_ratio", t) == massive_ratio(X));
      if (t < 3)
        CHECK(EngineRun::value(r, "update_size", t) ==
              update_size(X, r.snapshots[0][static_cast<std::size_t>(t) + 1]));
    }
  }
  SECTION("results do not depend on the thread count") {
    e.keys["run.trials"] = "3";
    e.keys["model.layers"] = "2";
    auto k = e.keys;
    k.erase("output.tokens");
    const EngineSetup s = prepare(make_config(k));
    const RunResults a = run_simulation(s, 1), b = run_simulation(s, 2);
    for (std::size_t i = 0; i < a.token.size(); ++i) CHECK(a.token[i].cwiseEqual(b.token[i]).all());
    for (std::size_t i = 0; i < a.attention.size(); ++i) CHECK(a.attention[i].cwiseEqual(b.attention[i]).all());
  }
  SECTION("dropout: ||dL/dX(0)||, ||dL/dW_Q|| against FD of the engine's loss (the same draws)") {
    e.keys["dropout.attention"] = "0.3";
    e.keys["dropout.output"] = "0.2";
    const RunResults r1 = e.run();  // one block: the fixed W_Q is that block's alone
    CHECK(std::abs(EngineRun::value(r1, "grad_wq_norm", 0) / fd_gradient(e.WQ, [&] { return e.loss(); }).norm() - 1) <
          kTol);
    e.keys["model.layers"] = "2";  // two blocks: the stream carries on from the first block's draws
    const RunResults r2 = e.run();
    CHECK(std::abs(EngineRun::value(r2, "grad_x_norm", 0) / fd_gradient(e.X0, [&] { return e.loss(); }).norm() - 1) <
          kTol);
  }
}

TEST_CASE("engine: the reverse pass from checkpoints (segments of 1 to 6 blocks) equals the stored one",
          "[backward]") {
  // Segments replay the blocks from a checkpoint (the input, the trial's stream, the weight sampler):
  // every gradient measure must be the same, value for value, as with every block stored.
  std::map<std::string, std::string> keys = {
      {"model.tokens", "5"},        {"model.dim", "4"},        {"model.layers", "7"},   {"norm.type", "layernorm"},
      {"norm.position", "pre"},     {"residual.alpha", "1"},   {"mask.type", "causal"}, {"mlp.width", "6"},
      {"run.trials", "3"},
      {"output.measures", "grad_x_norm,grad_wq_norm,grad_wk_norm,grad_wv_norm,jacobian_log_fro2,jacobian_log_spec2,"
                          "last_token_sensitivity"}};
  const std::vector<std::pair<std::string, std::string>> weight_laws = {
      {"weights.shared", "false"}, {"weights.shared", "true"}, {"weights.redraw_every", "3"},
      {"weights.across_trials", "shared"}, {"dropout.attention", "0.3"},
      {"norm.depth_scaling", "inv_sqrt_layer"},  // the replay gives each block its own scale (at_layer)
      {"run.precision", "float32"}};  // the replay runs the float forward, the reverse pass in float
  for (const auto& [key, value] : weight_laws) {
    auto k = keys;
    k[key] = value;
    if (key == "dropout.attention") k["dropout.output"] = "0.2";  // every dropout stage replayed
    EngineSetup s = prepare(make_config(k));
    REQUIRE(gradient_segment_length(s.config) == 7);  // small: every block stored
    const RunResults stored = run_simulation(s, 1);
    for (const int length : {1, 2, 3, 6}) {
      INFO(key << " = " << value << ", segments of " << length);
      s.gradient_segment = length;
      const RunResults r = run_simulation(s, 2);
      for (std::size_t i = 0; i < r.token.size(); ++i) CHECK(r.token[i].cwiseEqual(stored.token[i]).all());
      for (std::size_t i = 0; i < r.attention.size(); ++i)
        CHECK(r.attention[i].cwiseEqual(stored.attention[i]).all());
      CHECK(stored.token[0].allFinite());
    }
  }
}

TEST_CASE("gradient memory: every block stored when small and checkpoints every ceil(sqrt(L)) blocks when deep",
          "[backward][memory]") {
  auto c = make_config({{"model.tokens", "128"}, {"model.dim", "64"}, {"model.layers", "8"},
                        {"output.measures", "grad_x_norm"}});
  CHECK(gradient_segment_length(c) == 8);
  // One block: N d inputs + 3 d^2 weights + 4 d normalisation slots (layer_weight_values).
  const double block = 128.0 * 64 + 3 * 64.0 * 64 + 4 * 64;
  CHECK(layer_weight_values(c) == 3 * 64.0 * 64 + 4 * 64);
  CHECK(gradient_store_bytes(c, 8) == 8.0 * 8 * block);
  c.model.layers = 10000;  // 1.6 GB stored: checkpoints every 100 blocks, 100 + 100 blocks kept
  CHECK(gradient_segment_length(c) == 100);
  CHECK(gradient_store_bytes(c, 100) == 8.0 * 200 * block);
  CHECK(gradient_store_bytes(c, 100) < kGradientStoreBytes);
  c.model.layers = 10001;  // ceil: 101 blocks per segment, 100 checkpoints
  CHECK(gradient_segment_length(c) == 101);
  CHECK(gradient_store_bytes(c, 101) == 8.0 * (100 + 101) * block);
}

TEST_CASE("engine: DeepNorm (residual.mixing = deepnorm) and Cowsik mixing, gradients against FD",
          "[backward][variants]") {
  RandomStream rng(22, 0);
  EngineRun e;
  e.X0 = gaussian(4, 3, rng);
  e.WQ = gaussian(3, 3, rng, 0.7);
  e.keys = {{"model.tokens", "4"},   {"model.dim", "3"},       {"model.layers", "3"}, {"norm.type", "layernorm"},
            {"residual.alpha", "1"}, {"mlp.width", "5"},       {"run.trials", "1"},   {"output.tokens", "all"},
            {"mask.type", "causal"}, {"output.measures", "grad_x_norm,grad_wq_norm"}};
  SECTION("deepnorm: post-LN, a = (2L)^(1/4), branch weights scaled by (8L)^(-1/4)") {
    e.keys["residual.mixing"] = "deepnorm";
    const Config c = make_config(e.keys);
    CHECK(c.residual_skip == std::pow(6.0, 0.25));
    CHECK(c.weights.branch_gain == std::pow(24.0, -0.25));
  }
  SECTION("cowsik: pre-LN, a = sqrt(1 - alpha^2)") {
    e.keys["residual.mixing"] = "cowsik";
    e.keys["residual.alpha"] = "0.6";
    e.keys["norm.position"] = "pre";
    CHECK(make_config(e.keys).residual_skip == Approx(0.8).epsilon(1e-15));
  }
  SECTION("cowsik with the MLP's own alpha_M: skip sqrt(1 - alpha_M^2) for the MLP sub-block") {
    e.keys["residual.mixing"] = "cowsik";
    e.keys["residual.alpha"] = "0.6";
    e.keys["residual.mlp_alpha"] = "0.9";
    e.keys["norm.position"] = "pre";
  }
  SECTION("shaped attention, gap removal") {
    e.keys["attention.shape_c"] = "1";
    e.keys["norm.position"] = "peri";
  }
  const RunResults r = e.run();  // 3 blocks: dL/dX(0)
  const Matrix gx = fd_gradient(e.X0, [&] { return e.loss(); });
  CHECK(std::abs(EngineRun::value(r, "grad_x_norm", 0) / gx.norm() - 1) < kTol);
  e.keys["model.layers"] = "1";  // one block: W_Q (fixed, the same in every block) is block 0's alone
  const RunResults r1 = e.run();
  const Matrix gq = fd_gradient(e.WQ, [&] { return e.loss(); });
  CHECK(std::abs(EngineRun::value(r1, "grad_wq_norm", 0) / gq.norm() - 1) < kTol);
}

TEST_CASE("engine: logit biases, QK-normalisation, depth scaling, gradients against FD", "[backward][variants]") {
  RandomStream rng(24, 0);
  EngineRun e;
  e.X0 = gaussian(4, 3, rng);
  e.WQ = gaussian(3, 3, rng, 0.7);
  e.keys = {{"model.tokens", "4"},   {"model.dim", "3"},       {"model.layers", "3"}, {"norm.type", "layernorm"},
            {"residual.alpha", "1"}, {"mlp.width", "5"},       {"run.trials", "1"},   {"output.tokens", "all"},
            {"mask.type", "causal"}, {"norm.position", "pre"}, {"model.heads", "2"},
            {"output.measures", "grad_x_norm,grad_wq_norm"}};
  SECTION("alibi") { e.keys["attention.logit_bias"] = "alibi"; }
  SECTION("decay, complete mask") {
    e.keys["attention.logit_bias"] = "decay";
    e.keys["attention.decay"] = "0.7";
    e.keys["mask.type"] = "complete";
  }
  SECTION("QK-normalisation") {
    e.keys["attention.qk_norm"] = "true";
    e.keys["attention.qk_scale"] = "1.4";
  }
  SECTION("residual 1/sqrt(L) and LayerNorm 1/sqrt(l)") {
    e.keys["residual.depth_scaling"] = "inv_sqrt_depth";
    e.keys["norm.depth_scaling"] = "inv_sqrt_layer";
  }
  const RunResults r = e.run();  // 3 blocks: dL/dX(0)
  const Matrix gx = fd_gradient(e.X0, [&] { return e.loss(); });
  CHECK(std::abs(EngineRun::value(r, "grad_x_norm", 0) / gx.norm() - 1) < kTol);
  e.keys["model.layers"] = "1";  // one block: W_Q (fixed, the same in every block) is block 0's alone
  e.keys["model.heads"] = "1";   // and one head (a fixed W_Q is every head's: the FD gradient sums them)
  const RunResults r1 = e.run();
  const Matrix gq = fd_gradient(e.WQ, [&] { return e.loss(); });
  CHECK(std::abs(EngineRun::value(r1, "grad_wq_norm", 0) / gq.norm() - 1) < kTol);
}

TEST_CASE("engine: grad_wo_norm against FD of the readout loss in W_O, 0 without W_O", "[backward]") {
  RandomStream rng(23, 0);
  EngineRun e;
  e.X0 = gaussian(4, 3, rng);
  e.WQ = gaussian(3, 3, rng, 0.7);
  e.WO = gaussian(2, 3, rng, 0.6);  // d_v = 2: W_O is d_v x d
  e.keys = {{"model.tokens", "4"},    {"model.dim", "3"},         {"model.layers", "2"},
            {"model.value_dim", "2"}, {"norm.type", "layernorm"}, {"residual.alpha", "1"},
            {"run.trials", "1"},      {"output.tokens", "all"},   {"weights.shared", "true"},
            {"output.measures", "grad_wo_norm,grad_wq_norm"}};
  const RunResults r = e.run();
  // Shared weights: both blocks use the same W_O, so the FD gradient in W_O is the sum of the two
  // blocks' gradients; each block's own norm is below the sum's triangle bound.
  const Matrix go = fd_gradient(e.WO, [&] { return e.loss(); });
  const double g0 = EngineRun::value(r, "grad_wo_norm", 0), g1 = EngineRun::value(r, "grad_wo_norm", 1);
  CHECK(g0 > 0);
  CHECK(g1 > 0);
  CHECK(go.norm() <= (g0 + g1) * (1 + kTol));
  // One block: the measure is the FD gradient's norm.
  e.keys["model.layers"] = "1";
  const RunResults one = e.run();
  const Matrix go1 = fd_gradient(e.WO, [&] { return e.loss(); });
  CHECK(std::abs(EngineRun::value(one, "grad_wo_norm", 0) / go1.norm() - 1) < kTol);
  // Without an output projection the gradient is empty: norm 0.
  EngineRun plain = e;
  plain.WO = Matrix();
  plain.keys.erase("model.value_dim");
  CHECK(EngineRun::value(plain.run(), "grad_wo_norm", 0) == 0.0);
}

TEST_CASE("engine: grad_mlp_in_norm and grad_mlp_out_norm against FD of the readout loss in W_in, W_out",
          "[backward]") {
  // One block with a given MLP (host arrays, as rcsim.simulate passes them): each measure is the
  // norm of the FD gradient of L = 1^T X(1) R in that matrix.
  RandomStream rng(29, 0);
  const auto c = make_config({{"model.tokens", "4"},    {"model.dim", "3"},         {"model.layers", "1"},
                              {"mlp.width", "5"},       {"norm.type", "layernorm"}, {"norm.position", "pre"},
                              {"residual.alpha", "1"},  {"run.trials", "1"},        {"output.tokens", "all"},
                              {"weights.mlp", "file"},  {"weights.file", "<arrays>"},
                              {"output.measures", "grad_mlp_in_norm,grad_mlp_out_norm,grad_wq_norm"}});
  Matrix W_in = gaussian(3, 5, rng, 0.7), W_out = gaussian(5, 3, rng, 0.5);
  const auto nd = [](const Matrix& m) {
    NdArray a;
    a.shape = {static_cast<Extent>(m.rows()), static_cast<Extent>(m.cols())};
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) a.data.push_back(m(i, j));
    return a;
  };
  const auto run = [&] {
    const MaskMatrix mask = make_mask(c);
    return run_simulation(prepare(c, &mask, input_arrays_from(c, {{"W_in", nd(W_in)}, {"W_out", nd(W_out)}}, "test")), 1);
  };
  const auto loss = [&] { return (run().snapshots[0].back() * readout(c, 0)).sum(); };
  const RunResults r = run();
  const auto value = [&](const char* name) {
    for (std::size_t i = 0; i < r.attention_info.size(); ++i)
      if (std::string(r.attention_info[i].name) == name) return r.attention[i](0, 0);
    throw std::logic_error(name);
  };
  CHECK(std::abs(value("grad_mlp_in_norm") / fd_gradient(W_in, loss).norm() - 1) < kTol);
  CHECK(std::abs(value("grad_mlp_out_norm") / fd_gradient(W_out, loss).norm() - 1) < kTol);
  CHECK(value("grad_wq_norm") > 0);
}

TEST_CASE("the random streams of a trial are distinct (weights, dropout, readout, noises, probes)", "[backward]") {
  // A stream shared by two uses repeats its draws in both (the Hutchinson probes once repeated init.noise's).
  const std::vector<std::uint64_t> ids = {kWeightsStream,   kPerturbationStream,  kLnGeometryStream,
                                          kDropoutStream,   kReadoutStream,       kProbeStream, kFullProbeStream,
                                          kInitNoiseStream, kDynamicsNoiseStream, kPowerStream, kGenerateStream};
  const std::set<std::uint64_t> distinct(ids.begin(), ids.end());
  CHECK(distinct.size() == ids.size());
}

TEST_CASE("engine: gradient measures with random_markov, tangent, rk4, dynamics.noise against FD and segments",
          "[backward][particles]") {
  const std::map<std::string, std::string> base = {
      {"model.tokens", "4"},     {"model.dim", "3"},        {"model.layers", "3"},  {"norm.type", "sphere"},
      {"norm.position", "post"}, {"residual.alpha", "0.5"}, {"mask.type", "causal"}, {"run.trials", "1"},
      {"output.tokens", "all"},  {"output.measures", "grad_x_norm,grad_wq_norm,grad_wv_norm,jacobian_log_fro2"}};
  const std::vector<std::map<std::string, std::string>> settings = {
      {{"attention.kind", "random_markov"}},
      {{"dynamics.noise", "0.3"}},
      {{"residual.project", "tangent"}},
      {{"dynamics.integrator", "rk4"}},
      {{"dynamics.integrator", "rk4"}, {"residual.project", "tangent"}, {"dynamics.noise", "0.2"}}};
  RandomStream rng(23, 0);
  double worst = 0.0;
  for (const auto& set : settings) {
    EngineRun e;
    e.X0 = gaussian(4, 3, rng);
    e.WQ = gaussian(3, 3, rng, 0.7);
    e.keys = base;
    std::string name;
    for (const auto& [key, value] : set) {
      e.keys[key] = value;
      name += key + "=" + value + " ";
    }
    INFO(name);
    const RunResults r = e.run();
    const double gx = fd_gradient(e.X0, [&] { return e.loss(); }).norm();
    const double ex = std::abs(EngineRun::value(r, "grad_x_norm", 0) / gx - 1);
    INFO("grad_x_norm against FD: " << ex);
    CHECK(ex < kParticleTol);
    worst = std::max(worst, ex);
    if (set.count("attention.kind")) {
      CHECK(EngineRun::value(r, "grad_wq_norm", 0) == 0.0);
    } else {
      // grad_wq_norm is block 0's; with a fixed W_Q (every block's) FD gives the sum over the blocks,
      // so the one-block run is compared.
      auto one = e;
      one.keys["model.layers"] = "1";
      const RunResults r1 = one.run();
      const double gq1 = fd_gradient(one.WQ, [&] { return one.loss(); }).norm();
      const double eq = std::abs(EngineRun::value(r1, "grad_wq_norm", 0) / gq1 - 1);
      INFO("grad_wq_norm (one block) against FD: " << eq);
      CHECK(eq < kParticleTol);
      worst = std::max(worst, eq);
    }
    // Checkpointed segments replay the same blocks, draws and noise: equal value for value.
    auto k = base;
    for (const auto& [key, value] : set) k[key] = value;
    k.erase("output.tokens");
    k["model.layers"] = "7";
    k["run.trials"] = "2";
    k["output.measures"] = "grad_x_norm,grad_wq_norm,grad_wk_norm,grad_wv_norm,jacobian_log_fro2";
    for (const std::string precision : {"float64", "float32"}) {
      k["run.precision"] = precision;
      EngineSetup s = prepare(make_config(k));
      const RunResults stored = run_simulation(s, 1);
      REQUIRE(stored.token[0].allFinite());
      for (const int length : {1, 2, 3, 6}) {
        INFO(precision << ", segments of " << length);
        s.gradient_segment = length;
        const RunResults seg = run_simulation(s, 2);
        for (std::size_t i = 0; i < seg.token.size(); ++i) CHECK(seg.token[i].cwiseEqual(stored.token[i]).all());
      }
      const Matrix cot = Matrix::Constant(4, 3, 0.3);  // rcsim.gradients: the same forward and reverse pass
      const TrialGradients tg = trial_gradients(s, 1, cot);
      CHECK(tg.dX[0].allFinite());
    }
  }
  WARN("engine with random_markov, tangent, rk4, noise: grad_x_norm, grad_wq_norm against FD, worst " << worst);
}

TEST_CASE("trial_gradients on the cpu platform (no dense mask) follows the reference platform", "[backward]") {
  // The cpu platform's setup holds the mask as ranges only; trial_gradients makes the dense mask
  // for its reverse pass. Its forward is the fused attention: equal to the reference to rounding.
  std::map<std::string, std::string> k = {{"model.tokens", "9"}, {"model.dim", "4"}, {"model.layers", "3"},
                                          {"mask.type", "sliding_window"}, {"mask.window", "2"},
                                          {"run.trials", "1"}, {"norm.type", "layernorm"}, {"run.platform", "cpu"}};
  const EngineSetup cpu = prepare(make_config(k));
  k["run.platform"] = "reference";
  const EngineSetup ref = prepare(make_config(k));
  CHECK(cpu.mask.size() == 0);
  CHECK(ref.mask == sliding_window_mask(9, 2));
  Matrix cot(9, 4);  // not constant: LayerNorm's output is blind to a constant cotangent
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 4; ++j) cot(i, j) = std::sin(1.0 + i + 2.0 * j);
  const TrialGradients a = trial_gradients(cpu, 0, cot), b = trial_gradients(ref, 0, cot);
  CHECK((a.output - b.output).norm() <= 1e-12 * b.output.norm());
  REQUIRE(a.dX.size() == b.dX.size());
  for (std::size_t t = 0; t < a.dX.size(); ++t) {
    INFO("layer " << t);
    CHECK(b.dX[t].norm() > 1e-3);
    CHECK((a.dX[t] - b.dX[t]).norm() <= 1e-10 * b.dX[t].norm());
  }
}
