// The stepper's adjoint against finite differences: the tangent projection, the RK4 step and the
// noise step (dynamics.noise), each with the wrong adjoint that must fail.
#include "backward_support.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

// ---- The reverse pass for random-Markov attention, dynamics.noise, the tangent projection and RK4
// (issue 23, item 1, the settings the engine refused before) ----

TEST_CASE("tangent projection P_X(A(X)) against FD: through the vector and the point, the naive adjoint fails",
          "[backward][particles]") {
  double worst = 0.0, naive_least = 1e300;
  std::uint64_t seed = 950;
  for (const std::string mask : {"complete", "causal", "window", "custom"})
    for (const NormType norm : {NormType::sphere, NormType::none, NormType::layernorm})
      for (const bool markov : {false, true}) {
        Case k;
        k.pos = NormPosition::post;  // config: tangent needs post, a residual, no MLP
        k.tangent = true;
        k.norm = norm;
        k.alpha = 0.6;
        k.dv = markov ? 0 : 3;
        k.random_markov = markov;
        const StackCheck r = check_stack(k, mask, 3, ++seed);
        INFO(mask << " " << norm_name(norm) << (markov ? " random_markov" : "") << ": " << stack_text(r));
        CHECK(r.worst() < kParticleTol);
        worst = std::max(worst, r.worst());
        // Without the projection in the adjoint at all: fails.
        Case plain = k;
        plain.tangent = false;
        CHECK(check_stack(k, mask, 3, seed, &plain).x > 1e-2);
      }
  // The naive adjoint that treats P_X as a fixed linear map (ignores that P depends on X), one block:
  // L = sum(C .* N(X + a P_X(A(X)))), naive dX = dZ + A^T(a P_X(dZ)), dZ = N^T(C).
  for (const std::string mask : {"complete", "causal", "custom"}) {
    Case k;
    k.pos = NormPosition::post;
    k.tangent = true;
    k.norm = NormType::sphere;
    k.alpha = 0.6;
    RandomStream rng(77, 0);
    Fixture f(k, backward_test_mask(mask, k.N));
    const std::vector<LayerWeights> ws = {random_weights(k, rng)};
    Matrix X0 = gaussian(k.N, k.d, rng);
    const Matrix C = gaussian(k.N, k.d, rng);
    const Matrix fd = fd_gradient(X0, [&] { return f.forward(X0, ws).cwiseProduct(C).sum(); });
    LayerParams inner = f.p.layer;
    static const Normalization identity;
    inner.alpha = 0.0;
    inner.norm = &identity;
    inner.project = ResidualProject::none;
    LayerWorkspace lws(k.N, k.d, k.dk);
    Matrix Y;
    attention_layer(X0, ws[0], inner, lws, Y);
    Matrix PY = Y;
    project_tangent(X0, PY);
    const Matrix Z = X0 + k.alpha * PY;
    RowVector dg, db;
    const Matrix dZ = norm_backward(Z, C, ws[0].norms[kNormAttn], dg, db);
    Matrix PdZ = k.alpha * dZ;
    project_tangent(X0, PdZ);  // P_x is symmetric: its adjoint in v is P_x itself
    BlockGrads gn;
    gn.dq.assign(2, Matrix::Zero(k.d, k.dk));
    gn.dk.assign(2, Matrix::Zero(k.d, k.dk));
    gn.dv.assign(2, Matrix::Zero(k.d, k.d));
    const Matrix naive = dZ + attention_backward(X0, ws[0], inner, PdZ, gn);
    BlockGrads g;
    block_backward(X0, ws[0], f.p, C, g);
    // The x-term of the projection's adjoint (tangent_backward) is what the naive one misses.
    Matrix dXp;
    const Matrix dV = tangent_backward(X0, Y, k.alpha * dZ, dXp);
    CHECK(rel_err(dV, PdZ) < 1e-14);
    CHECK(rel_err(naive + dXp, g.dX) < 1e-12);
    INFO(mask << ": ours " << rel_err(g.dX, fd) << ", naive " << rel_err(naive, fd));
    CHECK(rel_err(g.dX, fd) < kParticleTol);
    CHECK(rel_err(naive, fd) > 1e-2);
    naive_least = std::min(naive_least, rel_err(naive, fd));
  }
  WARN("tangent: worst relative error against FD " << worst << "; the naive adjoint (P fixed) misses by at least "
                                                    << naive_least);
}

TEST_CASE("RK4 step of the attention flow against FD: through the four stages, the Euler (k1 only) adjoint fails",
          "[backward][particles]") {
  double worst = 0.0, euler_least = 1e300;
  std::uint64_t seed = 1000;
  for (const std::string mask : {"complete", "causal", "window", "custom"})
    for (const NormType norm : {NormType::sphere, NormType::none, NormType::rmsnorm})
      for (int variant = 0; variant < 3; ++variant) {
        Case k;
        k.pos = NormPosition::post;  // config: rk4 needs post, a residual (dt = alpha), no MLP, no dropout
        k.rk4 = true;
        k.norm = norm;
        k.alpha = 0.45;
        k.dv = variant == 0 ? 3 : 0;
        k.tangent = variant == 1;
        k.random_markov = variant == 2;
        k.head_mean = variant == 2;
        k.attn_bias = variant == 0 && mask == "custom";
        const StackCheck r = check_stack(k, mask, 3, ++seed);
        INFO(mask << " " << norm_name(norm) << " variant " << variant << ": " << stack_text(r));
        CHECK(r.worst() < kParticleTol);
        worst = std::max(worst, r.worst());
        // The adjoint of one Euler step X + dt F(X) (only k1) on the same RK4 forward must fail.
        Case euler = k;
        euler.rk4 = false;
        const StackCheck bad = check_stack(k, mask, 3, seed, &euler);
        INFO("Euler adjoint: " << stack_text(bad));
        CHECK(bad.x > 1e-3);
        euler_least = std::min(euler_least, bad.x);
      }
  WARN("rk4: worst relative error against FD " << worst << "; the Euler adjoint misses dL/dX(0) by at least "
                                                << euler_least);
}

namespace {

// A stack with the noise step after each block (dynamics.noise): X(t+1) = P(block(X(t)) + s G_t),
// G_t from `noise_seed`'s stream. Returns the relative FD errors of dL/dX(0) and of block 0's
// W_Q, W_V; `fresh` gives the reverse pass other draws, `undifferentiated` drops P's adjoint.
struct NoiseCheck {
  double x = 0, q = 0, v = 0;
};
NoiseCheck check_noise(const Case& k, const std::string& mask_type, NormType noise_norm, std::uint64_t seed,
                       bool fresh = false, bool undifferentiated = false) {
  RandomStream rng(seed, 0);
  Fixture f(k, backward_test_mask(mask_type, k.N));
  const Normalization P(noise_norm, k.d, 0.0);
  std::vector<LayerWeights> ws;
  const int layers = 3;
  for (int t = 0; t < layers; ++t) ws.push_back(random_weights(k, rng));
  Matrix X0 = gaussian(k.N, k.d, rng);
  const Matrix C = gaussian(k.N, k.d, rng);
  const double scale = 0.4;
  const RandomStream noise0(seed, 0, kDynamicsNoiseStream);
  const auto run = [&](std::vector<Matrix>* inputs, std::vector<RandomStream>* streams) {
    RandomStream z = noise0;
    Matrix X = X0, next;
    BlockWorkspace bws(k.N, k.d, k.dk);
    for (int t = 0; t < layers; ++t) {
      if (inputs) inputs->push_back(X);
      if (streams) streams->push_back(z);
      transformer_block(X, ws[static_cast<std::size_t>(t)], at_layer(f.p, t), bws, next);
      apply_dynamics_noise(next, scale, z, P);
      X = next;
    }
    return X;
  };
  const auto loss = [&] { return run(nullptr, nullptr).cwiseProduct(C).sum(); };
  BlockTape tape;
  run(&tape.inputs, &tape.noise);
  tape.weights = ws;
  if (fresh)
    for (auto& z : tape.noise) z = RandomStream(seed + 77, 0, kDynamicsNoiseStream);
  const NoiseStep step{scale, &P, nullptr};
  BlockParams p = f.p;
  p.noise = undifferentiated ? nullptr : &step;
  if (undifferentiated) tape.noise.clear();
  BlockGrads g0;
  const Matrix dX0 = stack_backward_segments(
      layers, layers, [&](int, int, BlockTape& out) { out = tape; }, p, C, [](int, const Matrix&) {},
      [&](int t, const BlockGrads& g) {
        if (t == 0) g0 = g;
      });
  NoiseCheck r;
  r.x = rel_err(dX0, fd_gradient(X0, loss));
  for (int h = 0; h < k.H; ++h) {
    r.q = std::max(r.q, rel_err(g0.dq[h], fd_gradient(ws[0].q[h], loss)));
    r.v = std::max(r.v, rel_err(g0.dv[h], fd_gradient(ws[0].v[h], loss)));
  }
  return r;
}

}  // namespace

TEST_CASE("dynamics.noise: the noise step P(X + s G) against FD with the same draws, fresh draws fail",
          "[backward][particles]") {
  double worst = 0.0, fresh_least = 1e300, undiff_least = 1e300;
  std::uint64_t seed = 1100;
  for (const std::string mask : {"complete", "causal", "custom"})
    for (const NormType norm : {NormType::sphere, NormType::none})
      for (const bool particles : {false, true}) {
        Case k;  // config: noise needs norm.type none, or sphere with norm.position = post
        k.pos = NormPosition::post;
        k.norm = norm;
        k.norms_from_file = false;
        k.alpha = 0.5;
        k.dv = particles ? 0 : 3;
        k.tangent = particles && norm == NormType::sphere;
        k.rk4 = particles;
        k.random_markov = particles && norm == NormType::none;
        const NoiseCheck r = check_noise(k, mask, norm, ++seed);
        INFO(mask << " " << norm_name(norm) << (particles ? " rk4 (tangent / random_markov)" : "") << ": X " << r.x
                  << " Q " << r.q << " V " << r.v);
        CHECK(std::max({r.x, r.q, r.v}) < kParticleTol);
        worst = std::max({worst, r.x, r.q, r.v});
        if (norm == NormType::sphere) {  // with P = identity the draws do not enter the adjoint
          const NoiseCheck fresh = check_noise(k, mask, norm, seed, true);
          const NoiseCheck undiff = check_noise(k, mask, norm, seed, false, true);
          INFO("fresh draws: X " << fresh.x << "; P not differentiated: X " << undiff.x);
          CHECK(fresh.x > 1e-2);
          CHECK(undiff.x > 1e-2);
          fresh_least = std::min(fresh_least, fresh.x);
          undiff_least = std::min(undiff_least, undiff.x);
        }
      }
  WARN("dynamics.noise: worst relative error against FD " << worst << "; fresh draws miss dL/dX(0) by at least "
                                                           << fresh_least << ", P undifferentiated by " << undiff_least);
}
