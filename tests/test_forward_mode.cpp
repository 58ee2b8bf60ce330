// The forward-mode pass (JVP) against the adjoint (dot-product test) and central differences; power
// iteration on J^T J and jacobian_log_spec2_full.
#include "backward_support.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

// ---- the forward-mode pass (JVP) and jacobian_log_spec2_full (issue 23, item 2) ----

namespace {

// <A, B> = sum_ij A_ij B_ij.
double inner(const Matrix& a, const Matrix& b) { return a.cwiseProduct(b).sum(); }

// The forward of `layers` blocks of fixture f from X0 with dropout probabilities (pa, po) drawn from a
// copy of `start` (0, 0: no dropout); records every block's input and stream as the forward entered it.
struct DropStack {
  const Fixture& f;
  std::vector<LayerWeights> ws;
  double pa = 0.0, po = 0.0;
  RandomStream start{41, 3, kDropoutStream};
  Matrix forward(const Matrix& X0, std::vector<Matrix>* inputs = nullptr,
                 std::vector<RandomStream>* streams = nullptr) const {
    RandomStream r = start;
    const Dropout drop{pa, po, &r};
    Matrix X = X0, next;
    BlockWorkspace bws(f.k.N, f.k.d, f.k.dk);
    for (std::size_t t = 0; t < ws.size(); ++t) {
      BlockParams p = at_layer(f.p, static_cast<int>(t));
      if (pa > 0 || po > 0) p.layer.dropout = &drop;
      if (inputs) inputs->push_back(X);
      if (streams) streams->push_back(r);
      transformer_block(X, ws[t], p, bws, next);
      X = next;
    }
    return X;
  }
  // The tape the reverse pass and the forward-mode pass read (BlockTape), from X0.
  BlockTape tape(const Matrix& X0) const {
    BlockTape t;
    forward(X0, &t.inputs, &t.dropout);
    t.weights = ws;
    if (!(pa > 0 || po > 0)) t.dropout.clear();
    return t;
  }
};

// StackJacobian over a tape held by the test (segments of `length` blocks copied from it).
StackJacobian stack_jacobian(const BlockTape& whole, const BlockParams& p, int length, const Dropout* drop) {
  BlockParams q = p;
  q.layer.dropout = drop;
  const int L = static_cast<int>(whole.inputs.size());
  return StackJacobian(L, length, [&whole](int b, int e, BlockTape& out) {
    out.inputs.assign(whole.inputs.begin() + b, whole.inputs.begin() + e);
    out.weights.assign(whole.weights.begin() + b, whole.weights.begin() + e);
    out.dropout.clear();
    if (!whole.dropout.empty()) out.dropout.assign(whole.dropout.begin() + b, whole.dropout.begin() + e);
  }, q);
}

// The grid of the dot-product test: every variant the reverse pass covers, each a Case and a mask.
std::vector<std::pair<std::string, Case>> jvp_grid() {
  std::vector<std::pair<std::string, Case>> g;
  const char* masks[] = {"complete", "causal", "window", "custom"};
  int i = 0;
  for (const NormType n : {NormType::none, NormType::sphere, NormType::projection, NormType::layernorm, NormType::rmsnorm,
                           NormType::dyt, NormType::derf})
    for (const NormPosition pos : {NormPosition::post, NormPosition::pre, NormPosition::peri, NormPosition::ngpt}) {
      Case k;
      k.norm = n;
      k.pos = pos;
      k.m = (i % 2) ? 5 : 0;
      k.dv = (i % 3 == 0) ? 3 : 0;
      k.act = static_cast<MlpActivation>(i % 4);
      k.norms_from_file = (i % 2) == 0;
      k.alpha = (i % 5 == 0) ? 0.0 : 0.7;
      g.emplace_back(std::string(norm_name(n)) + " " + pos_name(pos) + " " + masks[i % 4], k);
      ++i;
    }
  const auto add = [&](const std::string& name, const std::function<void(Case&)>& set) {
    Case k;
    k.m = 4;
    set(k);
    g.emplace_back(name, k);
  };
  add("usa", [](Case& k) { k.usa = true; k.norm = NormType::sphere; k.pos = NormPosition::post; });
  add("hardmax", [](Case& k) { k.hardmax = true; });
  add("head mean", [](Case& k) { k.head_mean = true; k.H = 3; });
  add("one head d_qk 5", [](Case& k) { k.H = 1; k.d_qk = 5.0; });
  add("W_O and attention biases", [](Case& k) { k.dv = 3; k.attn_bias = true; });
  add("skip gain", [](Case& k) { k.skip = 0.6; k.pos = NormPosition::post; });
  add("mlp_alpha and mlp skip", [](Case& k) { k.mlp_alpha = 0.3; k.mlp_skip = 0.9; });
  add("shaped attention", [](Case& k) { k.shape = AttentionShape{0.8, 0.3, 0.2}; });
  add("gap removal", [](Case& k) { k.shape = AttentionShape{1.0, 0.0, 1.0}; });
  add("alibi", [](Case& k) { k.logit_bias.kind = LogitBiasKind::alibi; });
  add("decay", [](Case& k) { k.logit_bias.kind = LogitBiasKind::decay; k.logit_bias.gamma = 0.8; });
  add("qk norm", [](Case& k) { k.qk_norm = true; k.qk_scale = 1.7; k.attn_bias = true; });
  add("LayerNorm depth scaling", [](Case& k) { k.ln_depth_scaling = true; });
  add("relu mlp", [](Case& k) { k.act = MlpActivation::relu; k.pos = NormPosition::peri; });
  add("gelu_tanh no bias", [](Case& k) { k.act = MlpActivation::gelu_tanh; k.mlp_bias = false; });
  add("tanh ngpt", [](Case& k) { k.act = MlpActivation::tanh; k.pos = NormPosition::ngpt; k.norm = NormType::sphere; });
  const auto particle = [](Case& k) {  // config: tangent and rk4 need post, a residual, no MLP
    k.m = 0;
    k.pos = NormPosition::post;
    k.norm = NormType::sphere;
    k.alpha = 0.3;
  };
  add("tangent projection", [&](Case& k) { particle(k); k.tangent = true; });
  add("rk4", [&](Case& k) { particle(k); k.rk4 = true; });
  add("rk4 tangent random-Markov", [&](Case& k) { particle(k); k.rk4 = k.tangent = k.random_markov = true; });
  add("random-Markov", [](Case& k) { k.random_markov = true; });
  return g;
}

}  // namespace

TEST_CASE("forward mode: <U, J V> = <J^T U, V> against the adjoint over a grid of every variant (3-block stacks)",
          "[forward_mode]") {
  // The dot-product test pins the tangent to the hand-written adjoint (itself pinned to FD and torch)
  // at rounding level for every variant at once; the dropout cases draw the forward's masks.
  double worst = 0.0;
  int cases = 0;
  const char* masks[] = {"complete", "causal", "window", "custom"};
  int i = 0;
  for (const auto& [name, k] : jvp_grid()) {
    for (const bool dropout : {false, true}) {
      if (dropout && i % 3 != 0) continue;
      INFO(name << (dropout ? " with dropout" : ""));
      RandomStream rng(500 + static_cast<std::uint64_t>(i), 0);
      Fixture f(k, backward_test_mask(masks[i % 4], k.N));
      DropStack s{f, {}};
      if (dropout) s.pa = 0.3, s.po = 0.2;
      for (int t = 0; t < 3; ++t) s.ws.push_back(random_weights(k, rng));
      const Matrix X0 = gaussian(k.N, k.d, rng), V = gaussian(k.N, k.d, rng), U = gaussian(k.N, k.d, rng);
      const BlockTape tape = s.tape(X0);
      RandomStream unused = s.start;
      const Dropout drop{s.pa, s.po, &unused};
      StackJacobian J = stack_jacobian(tape, f.p, 2, dropout ? &drop : nullptr);  // segments of 2 blocks
      for (int t = 0; t <= 3; ++t) {
        const Matrix JV = J.jvp(t, V), JTU = J.vjp(t, U);
        const double a = inner(U, JV), b = inner(JTU, V);
        const double err = std::abs(a - b) / (U.norm() * JV.norm());
        INFO("t " << t << " <U, J V> " << a << " <J^T U, V> " << b);
        CHECK(err < 1e-12);
        worst = std::max(worst, err);
        ++cases;
      }
    }
    ++i;
  }
  WARN("forward mode, dot-product test over " << cases << " (variant, layer) pairs: largest relative gap " << worst);
}

TEST_CASE("forward mode against central differences of the forward pass (blocks and stacks, with dropout)",
          "[forward_mode]") {
  // Fourth-order central differences along V, (8 (f(+h) - f(-h)) - (f(+2h) - f(-2h))) / 12h = J V + O(h^4),
  // h = 1e-4: agreement within 1e-7 relative (the second-order (f(+h) - f(-h)) / 2h at h = 1e-5 misses
  // by up to 5e-7 on the 3-block pre-LN stack: truncation, not the tangent).
  struct Item {
    std::string name, mask;
    Case k;
    int layers;
    double pa, po;
  };
  std::vector<Item> items;
  {
    Case k;
    k.m = 5;
    k.dv = 3;
    items.push_back({"pre layernorm MLP W_O causal", "causal", k, 3, 0.0, 0.0});
    k.pos = NormPosition::post;
    k.norm = NormType::rmsnorm;
    k.attn_bias = true;
    items.push_back({"post rmsnorm biases custom, dropout", "custom", k, 3, 0.3, 0.25});
    k.pos = NormPosition::ngpt;
    k.norm = NormType::sphere;
    k.qk_norm = true;
    k.qk_scale = 2.0;
    items.push_back({"ngpt sphere qk-norm window", "window", k, 2, 0.0, 0.0});
    Case v;
    v.pos = NormPosition::peri;
    v.shape = AttentionShape{0.8, 0.3, 0.5};
    v.logit_bias.kind = LogitBiasKind::alibi;
    v.m = 4;
    v.act = MlpActivation::gelu_tanh;
    v.mlp_alpha = 0.4;
    items.push_back({"peri shaped alibi mlp_alpha, dropout", "complete", v, 3, 0.2, 0.1});
  }
  double worst = 0.0;
  for (const Item& it : items) {
    INFO(it.name);
    RandomStream rng(77, 1);
    Fixture f(it.k, backward_test_mask(it.mask, it.k.N));
    DropStack s{f, {}};
    s.pa = it.pa;
    s.po = it.po;
    for (int t = 0; t < it.layers; ++t) s.ws.push_back(random_weights(it.k, rng));
    const Matrix X0 = gaussian(it.k.N, it.k.d, rng), V = gaussian(it.k.N, it.k.d, rng);
    const BlockTape tape = s.tape(X0);
    RandomStream unused = s.start;
    const Dropout drop{s.pa, s.po, &unused};
    StackJacobian J = stack_jacobian(tape, f.p, it.layers, s.pa > 0 ? &drop : nullptr);
    const double h = 1e-4;
    const auto central = [&](const std::function<Matrix(const Matrix&)>& g, const Matrix& X) {
      return Matrix((8 * (g(X + h * V) - g(X - h * V)) - (g(X + 2 * h * V) - g(X - 2 * h * V))) / (12 * h));
    };
    const Matrix fd = central([&](const Matrix& X) { return s.forward(X); }, X0);
    const double err = rel_err(J.jvp(0, V), fd);
    INFO("relative error " << err);
    CHECK(err < 1e-7);
    worst = std::max(worst, err);
    // One block alone through block_jvp, and its tangent along a direction of the last block's input.
    RandomStream r = tape.dropout.empty() ? s.start : tape.dropout.back();
    BlockParams p = at_layer(f.p, it.layers - 1);
    if (s.pa > 0) p.layer.dropout = &drop;
    const Matrix& Xl = tape.inputs.back();
    const auto block = [&](const Matrix& X) {
      RandomStream copy = r;
      const Dropout d{s.pa, s.po, &copy};
      BlockParams q = p;
      if (s.pa > 0) q.layer.dropout = &d;
      Matrix next;
      BlockWorkspace bws(it.k.N, it.k.d, it.k.dk);
      transformer_block(X, s.ws.back(), q, bws, next);
      return next;
    };
    RandomStream copy = r;
    const Matrix jv = block_jvp(Xl, s.ws.back(), p, V, s.pa > 0 ? &copy : nullptr);
    const double e1 = rel_err(jv, central(block, Xl));
    CHECK(e1 < 1e-7);
    worst = std::max(worst, e1);
  }
  WARN("forward mode against central differences: largest relative error " << worst);
}

TEST_CASE("forward mode: a wrong tangent fails the dot-product test and the central differences", "[forward_mode]") {
  // (1) The tangent without the softmax's dependence on X (A held fixed: dY = A dX W_V), one head,
  // post, no normalisation, a = 0: block(X) = A(X) X W_V. (2) The pre-LN tangent of the block
  // without its LayerNorm scaling c = 1/sqrt(l) (the parameters of another layer).
  Case k;
  k.H = 1;
  k.norm = NormType::none;
  k.pos = NormPosition::post;
  k.alpha = 0.0;
  k.norms_from_file = false;
  RandomStream rng(91, 0);
  Fixture f(k, backward_test_mask("causal", k.N));
  const LayerWeights w = random_weights(k, rng);
  const Matrix X = gaussian(k.N, k.d, rng), V = gaussian(k.N, k.d, rng), U = gaussian(k.N, k.d, rng);
  BlockParams p = f.p;
  p.layer.keep_attention = true;
  BlockWorkspace bws(k.N, k.d, k.dk);
  Matrix Y;
  transformer_block(X, w, p, bws, Y);
  const Matrix A = bws.layer.attention_mean;  // H = 1: the head's attention
  const Matrix frozen = A * V * w.v[0];
  const Matrix right = block_jvp(X, w, f.p, V);
  BlockGrads g;
  block_backward(X, w, f.p, U, g);
  const double h = 1e-5;
  const auto fwd = [&](const Matrix& Z) {
    Matrix next;
    transformer_block(Z, w, f.p, bws, next);
    return next;
  };
  const Matrix fd = (fwd(X + h * V) - fwd(X - h * V)) / (2 * h);
  CHECK(rel_err(right, fd) < 1e-7);
  CHECK(std::abs(inner(U, right) - inner(g.dX, V)) / (U.norm() * right.norm()) < 1e-12);
  CHECK(rel_err(frozen, fd) > 1e-2);
  CHECK(std::abs(inner(U, frozen) - inner(g.dX, V)) / (U.norm() * frozen.norm()) > 1e-3);

  Case s;
  s.ln_depth_scaling = true;
  s.m = 4;
  Fixture fs(s, backward_test_mask("complete", s.N));
  const LayerWeights ws = random_weights(s, rng);
  const BlockParams at3 = at_layer(fs.p, 3), at0 = at_layer(fs.p, 0);  // c = 1/2 and c = 1
  const Matrix good = block_jvp(X, ws, at3, V), wrong = block_jvp(X, ws, at0, V);
  BlockGrads gs;
  block_backward(X, ws, at3, U, gs);
  CHECK(std::abs(inner(U, good) - inner(gs.dX, V)) / (U.norm() * good.norm()) < 1e-12);
  CHECK(std::abs(inner(U, wrong) - inner(gs.dX, V)) / (U.norm() * wrong.norm()) > 1e-3);
}

TEST_CASE("forward mode covers the particle settings: tangent projection, RK4, random-Markov, the noise step",
          "[forward_mode]") {
  // Each against fourth-order central differences of the production forward (with the noise step
  // P(block(X) + s G) on the same draws G) and against the adjoint (dot-product test); these were
  // refused by the forward-mode pass before issue 34.
  const auto particle = [](bool tangent, bool rk4, bool markov) {
    Case k;  // config: tangent and rk4 need post, a residual, no MLP; random-Markov draws its logits
    k.pos = NormPosition::post;
    k.norm = NormType::sphere;
    k.norms_from_file = false;
    k.alpha = 0.3;
    k.tangent = tangent;
    k.rk4 = rk4;
    k.random_markov = markov;
    return k;
  };
  struct Item {
    std::string name;
    Case k;
    double noise;
    NormType noise_norm;
  };
  Case plain;  // dynamics.noise with norm.type none (P none), pre with an MLP
  plain.norm = NormType::none;
  plain.m = 4;
  const std::vector<Item> items = {
      {"tangent projection", particle(true, false, false), 0.0, NormType::none},
      {"rk4", particle(false, true, false), 0.0, NormType::none},
      {"rk4 with the tangent projection", particle(true, true, false), 0.0, NormType::none},
      {"random-Markov", particle(false, false, true), 0.0, NormType::none},
      {"random-Markov rk4 tangent, noise on the sphere", particle(true, true, true), 0.2, NormType::sphere},
      {"tangent, noise on the sphere", particle(true, false, false), 0.3, NormType::sphere},
      {"pre MLP, noise without normalisation", plain, 0.3, NormType::none}};
  double worst_fd = 0.0, worst_dot = 0.0;
  int i = 0;
  for (const Item& it : items) {
    INFO(it.name);
    const Case& k = it.k;
    RandomStream rng(300 + static_cast<std::uint64_t>(i), 0);
    Fixture f(k, backward_test_mask(i % 2 ? "causal" : "complete", k.N));
    const LayerWeights w = random_weights(k, rng);
    const Matrix X = gaussian(k.N, k.d, rng), V = gaussian(k.N, k.d, rng), U = gaussian(k.N, k.d, rng);
    const Normalization P(it.noise_norm, k.d, 0.0);
    const NoiseStep step{it.noise, &P, nullptr};
    BlockParams p = f.p;
    if (it.noise > 0) p.noise = &step;
    const RandomStream z0(17 + static_cast<std::uint64_t>(i), 0, kDynamicsNoiseStream);
    const auto block = [&](const Matrix& Z) {
      Matrix next;
      BlockWorkspace bws(k.N, k.d, k.dk);
      transformer_block(Z, w, p, bws, next);
      RandomStream z = z0;
      if (it.noise > 0) apply_dynamics_noise(next, it.noise, z, P);
      return next;
    };
    const double h = 1e-4;
    const Matrix fd = (8 * (block(X + h * V) - block(X - h * V)) - (block(X + 2 * h * V) - block(X - 2 * h * V))) /
                      (12 * h);
    RandomStream z1 = z0, z2 = z0;
    const Matrix jv = block_jvp(X, w, p, V, nullptr, it.noise > 0 ? &z1 : nullptr);
    BlockGrads g;
    block_backward(X, w, p, U, g, nullptr, it.noise > 0 ? &z2 : nullptr);
    const double e = rel_err(jv, fd), dot = std::abs(inner(U, jv) - inner(g.dX, V)) / (U.norm() * jv.norm());
    INFO("relative error against FD " << e << ", dot-product gap " << dot);
    CHECK(e < 1e-7);
    CHECK(dot < 1e-12);
    CHECK(jv.norm() > 1e-3);  // not a vanishing tangent
    worst_fd = std::max(worst_fd, e);
    worst_dot = std::max(worst_dot, dot);
    ++i;
  }
  WARN("forward mode, particle settings: largest relative error against FD " << worst_fd << ", dot-product gap "
                                                                             << worst_dot);
}

TEST_CASE("forward mode: the noise step's tangent needs the forward's draws", "[forward_mode]") {
  // Fresh draws G' (another stream) linearise P at another point: the tangent then misses the FD of
  // the forward with its own draws.
  Case k;
  k.pos = NormPosition::post;
  k.norm = NormType::sphere;
  k.norms_from_file = false;
  k.alpha = 0.3;
  RandomStream rng(7, 0);
  Fixture f(k, backward_test_mask("complete", k.N));
  const LayerWeights w = random_weights(k, rng);
  const Matrix X = gaussian(k.N, k.d, rng), V = gaussian(k.N, k.d, rng);
  const Normalization P(NormType::sphere, k.d, 0.0);
  const NoiseStep step{0.5, &P, nullptr};
  BlockParams p = f.p;
  p.noise = &step;
  const RandomStream z0(5, 0, kDynamicsNoiseStream);
  const auto block = [&](const Matrix& Z) {
    Matrix next;
    BlockWorkspace bws(k.N, k.d, k.dk);
    transformer_block(Z, w, p, bws, next);
    RandomStream z = z0;
    apply_dynamics_noise(next, 0.5, z, P);
    return next;
  };
  const double h = 1e-5;
  const Matrix fd = (block(X + h * V) - block(X - h * V)) / (2 * h);
  RandomStream same = z0, fresh(6, 0, kDynamicsNoiseStream);
  CHECK(rel_err(block_jvp(X, w, p, V, nullptr, &same), fd) < 1e-6);
  CHECK(rel_err(block_jvp(X, w, p, V, nullptr, &fresh), fd) > 1e-3);
  CHECK_THROWS_AS(block_jvp(X, w, p, V), std::logic_error);  // the noise stream is required
}

namespace {

// The dense Jacobian J_t = dX(L)/dX(t) (Nd x Nd, column-major vec of X) from N d reverse passes.
Matrix dense_jacobian(StackJacobian& J, int t, int N, int d) {
  Matrix D(N * d, N * d);
  Matrix E = Matrix::Zero(N, d);
  for (int i = 0; i < N * d; ++i) {
    E.setZero();
    E.data()[i] = 1.0;
    const Matrix row = J.vjp(t, E);  // J^T e_i: row i of J
    D.row(i) = Eigen::Map<const RowVector>(row.data(), row.size());
  }
  return D;
}

}  // namespace

TEST_CASE("power iteration on J^T J against the dense Jacobian's largest singular value, from below",
          "[forward_mode][jacobian]") {
  // N = 4, d = 3, L = 3: every J_t (t = 0..3) built densely from 12 reverse passes; its largest
  // singular value squared by an SVD. The power iteration's Rayleigh quotient is below it at every
  // step (a lower bound) and within 1e-8 once converged.
  double worst = 0.0;
  int iterations = 0;
  for (const NormPosition pos : {NormPosition::pre, NormPosition::post, NormPosition::peri}) {
    Case k;
    k.N = 4;
    k.d = 3;
    k.pos = pos;
    k.m = 5;
    RandomStream rng(17, 0);
    Fixture f(k, backward_test_mask("causal", k.N));
    DropStack s{f, {}};
    for (int t = 0; t < 3; ++t) s.ws.push_back(random_weights(k, rng));
    const BlockTape tape = s.tape(gaussian(k.N, k.d, rng));
    StackJacobian J = stack_jacobian(tape, f.p, 3, nullptr);
    for (int t = 0; t <= 3; ++t) {
      INFO(pos_name(pos) << " t " << t);
      const Matrix D = dense_jacobian(J, t, k.N, k.d);
      const double top = Eigen::JacobiSVD<Matrix>(D).singularValues()(0);
      const Matrix V0 = gaussian(k.N, k.d, rng);
      for (const int cap : {1, 2, 3, 5}) {  // every Rayleigh quotient is a lower bound
        const PowerIteration early = jacobian_power_iteration(J, t, V0, cap, 0.0);
        CHECK(early.lambda <= top * top * (1 + 1e-13));
      }
      const PowerIteration p = jacobian_power_iteration(J, t, V0, 2000, 1e-15);
      CHECK(p.converged);
      const double err = std::abs(p.lambda / (top * top) - 1);
      INFO("lambda " << p.lambda << " sigma_max^2 " << top * top << " iterations " << p.iterations);
      CHECK(err < 1e-8);
      worst = std::max(worst, err);
      iterations = std::max(iterations, p.iterations);
      // The dense J is also the JVP's: its columns J e_j.
      Matrix E = Matrix::Zero(k.N, k.d);
      E(1, 2) = 1.0;
      const Matrix col = J.jvp(t, E);
      CHECK(rel_err(Eigen::Map<const Vector>(col.data(), col.size()), D.col(2 * k.N + 1)) < 1e-13);
    }
  }
  WARN("power iteration against the dense Jacobian: largest relative error " << worst << ", at most " << iterations
                                                                          << " iterations");
}

TEST_CASE("engine: jacobian_log_spec2_full against the FD dense Jacobian and the readout-projected bound",
          "[forward_mode][jacobian]") {
  // t = 0: the dense J_0 = dX(L)/dX(0) of the engine's forward by central differences (fourth order)
  // of the snapshot X(L) in X(0). Every t: log ||J_t||_2^2 >= jacobian_log_spec2 - log ||R||^2, since
  // d(X(L) R)/dX(t) = P J_t with P: Y -> Y R of norm ||R|| (the power iteration converged: a lower bound
  // near its limit); ||J_t||_2^2 <= ||J_t||_F^2 is checked against the dense J_0; at t = L, J = I: 0.
  for (const std::string variant : {"causal pre-LN MLP", "post rmsnorm complete 2 heads"}) {
    INFO(variant);
    EngineRun e = small_engine(variant, 31);
    const int L = std::stoi(e.keys["model.layers"]);
    EngineRun plain = e;
    e.keys["output.measures"] = "jacobian_log_spec2,jacobian_log_spec2_full,jacobian_log_fro2_full";
    e.keys["metrics.power_iterations"] = "1000";
    e.keys["metrics.power_tolerance"] = "1e-14";
    const RunResults r = e.run();
    const Matrix& full = measure_matrix(r, "jacobian_log_spec2_full");
    const Matrix& spec = measure_matrix(r, "jacobian_log_spec2");
    Matrix D(12, 12);
    const double h = 1e-4;
    for (int j = 0; j < 12; ++j) {
      const auto at = [&](double step) {
        EngineRun q = plain;
        q.X0.data()[j] += step;
        return Matrix(q.run().snapshots[0].back());
      };
      const Matrix col = (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h);
      D.col(j) = Eigen::Map<const Vector>(col.data(), col.size());
    }
    const double top2 = std::pow(Eigen::JacobiSVD<Matrix>(D).singularValues()(0), 2);
    const double err = std::abs(std::exp(full(0, 0)) / top2 - 1);
    INFO("exp(jacobian_log_spec2_full) " << std::exp(full(0, 0)) << " FD sigma_max^2 " << top2);
    CHECK(err < 1e-8);
    WARN(variant << ": jacobian_log_spec2_full at t = 0 against the FD dense Jacobian: relative " << err);
    CHECK(std::exp(full(0, 0)) <= D.squaredNorm() * (1 + 1e-8));
    CHECK(std::exp(full(0, 0)) >= D.squaredNorm() / 12 * (1 - 1e-8));
    // jacobian_log_fro2_full (exact, 12 reverse passes) against the same dense Jacobian, and
    // ||J_t||_2^2 <= ||J_t||_F^2 <= N d ||J_t||_2^2 at every t (log(N d) = log 12 at t = L).
    const Matrix& fro = measure_matrix(r, "jacobian_log_fro2_full");
    const double fro_err = std::abs(std::exp(fro(0, 0)) / D.squaredNorm() - 1);
    CHECK(fro_err < 1e-8);
    WARN(variant << ": jacobian_log_fro2_full at t = 0 against the FD dense Jacobian: relative " << fro_err);
    for (int t = 0; t <= L; ++t) {
      CHECK(full(0, t) <= fro(0, t) + 1e-10);
      CHECK(fro(0, t) <= full(0, t) + std::log(12.0) + 1e-10);
    }
    CHECK(fro(0, L) == Approx(std::log(12.0)).epsilon(1e-15));
    const double logR2 = std::log(readout(make_config(e.keys), 0).squaredNorm());
    for (int t = 0; t <= L; ++t) {
      INFO("t " << t);
      CHECK(full(0, t) >= spec(0, t) - logR2 - 1e-10);
    }
    CHECK(std::abs(full(0, L)) < 1e-14);
  }
}

TEST_CASE("jacobian_log_spec2_full: reproducible, the same from checkpoints, other measures unchanged, keys checked",
          "[forward_mode][jacobian]") {
  std::map<std::string, std::string> k = {
      {"model.tokens", "5"},    {"model.dim", "3"},      {"model.layers", "5"},   {"norm.type", "layernorm"},
      {"norm.position", "pre"}, {"residual.alpha", "1"}, {"mask.type", "causal"}, {"mlp.width", "4"},
      {"run.trials", "2"},      {"dropout.attention", "0.2"},
      {"output.measures", "grad_x_norm,jacobian_log_spec2,jacobian_log_spec2_full"}};
  EngineSetup s = prepare(make_config(k));
  const RunResults a = run_simulation(s, 1), b = run_simulation(s, 2);
  const Matrix& fa = measure_matrix(a, "jacobian_log_spec2_full");
  REQUIRE(fa.allFinite());
  CHECK(fa.cwiseEqual(measure_matrix(b, "jacobian_log_spec2_full")).all());  // threads: the same values
  for (const int segment : {1, 2, 3}) {  // the tape replayed from checkpoints: the same values
    INFO("segments of " << segment);
    s.gradient_segment = segment;
    const RunResults c = run_simulation(s, 1);
    CHECK(measure_matrix(c, "jacobian_log_spec2_full").cwiseEqual(fa).all());
  }
  // Its own stream: the other measures as without it, bitwise.
  auto without = k;
  without["output.measures"] = "grad_x_norm,jacobian_log_spec2";
  const RunResults w = run_simulation(prepare(make_config(without)), 1);
  CHECK(measure_matrix(w, "grad_x_norm").cwiseEqual(measure_matrix(a, "grad_x_norm")).all());
  CHECK(measure_matrix(w, "jacobian_log_spec2").cwiseEqual(measure_matrix(a, "jacobian_log_spec2")).all());
  // The keys: at least 1 iteration, a tolerance in (0, 1); float32 refused with the measure.
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"metrics.power_iterations", "0"}, {"metrics.power_tolerance", "0"}, {"metrics.power_tolerance", "1"}}) {
    auto bad = k;
    bad[key] = value;
    INFO(key << " = " << value);
    CHECK_THROWS_AS(make_config(bad), UsageError);
    CHECK_THROWS_WITH(make_config(bad), Catch::Matchers::Contains(key));
  }
  auto single = k;
  single["run.precision"] = "float32";
  CHECK_THROWS_WITH(prepare(make_config(single)), Catch::Matchers::Contains("jacobian_log_spec2_full") &&
                                                      Catch::Matchers::Contains("run.precision = float32"));
  // A cap of 1: one JVP per layer, a smaller (or equal) lower bound.
  auto one = k;
  one["metrics.power_iterations"] = "1";
  const RunResults o = run_simulation(prepare(make_config(one)), 1);
  const Matrix& fo = measure_matrix(o, "jacobian_log_spec2_full");
  CHECK((fo.array() <= fa.array() + 1e-12).all());
  CHECK((fo.array() < fa.array() - 1e-3).any());
}

// The forward-mode pass covers what the reverse pass covers (issue 34: it refused these four until
// the operations carried their tangents). At the engine level, the power iteration's
// ||J_t||_2^2 (forward and reverse passes) must lie between ||J_t||_F^2 / (N d) and ||J_t||_F^2,
// the latter from N d exact reverse passes (jacobian_log_fro2_full): a wrong tangent breaks it.
TEST_CASE("jacobian_log_spec2_full covers the particle settings: between the Frobenius bounds of the reverse pass",
          "[forward_mode][particles]") {
  const std::map<std::string, std::string> base = {{"model.tokens", "4"},    {"model.dim", "3"},
                                                   {"model.layers", "2"},    {"residual.alpha", "0.5"},
                                                   {"norm.type", "sphere"},  {"norm.position", "post"},
                                                   {"run.trials", "1"},      {"metrics.power_iterations", "200"}};
  const std::vector<std::pair<std::string, std::string>> settings = {{"dynamics.integrator", "rk4"},
                                                                     {"residual.project", "tangent"},
                                                                     {"dynamics.noise", "0.1"},
                                                                     {"attention.kind", "random_markov"}};
  for (const auto& [key, value] : settings) {
    INFO(key << " = " << value);
    auto keys = base;
    keys[key] = value;
    keys["output.measures"] = "jacobian_log_spec2_full,jacobian_log_fro2_full";
    const RunResults r = run_simulation(prepare(make_config(keys)), 1);
    for (int t = 0; t <= 2; ++t) {
      const double spec = EngineRun::value(r, "jacobian_log_spec2_full", t);
      const double fro = EngineRun::value(r, "jacobian_log_fro2_full", t);
      REQUIRE(std::isfinite(spec));
      CHECK(spec <= fro + 1e-9);
      CHECK(spec >= fro - std::log(12.0) - 1e-9);
    }
  }
}
