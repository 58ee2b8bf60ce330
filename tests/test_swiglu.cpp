// mlp.activation = swiglu, the gated MLP of Llama (Shazeer 2020; llama2.c's w2(silu(w1 x) * (w3 x))):
//   M(X) = (silu(X W_in + b_in) .* (X W_gate)) W_out + b_out,   silu(z) = z / (1 + e^-z)
// (kernel/ops/mlp.hpp): a case worked by hand, the forward and adjoint against their formulas
// written out, the adjoint and tangent against finite differences (the operation and
// stacks of blocks), float32 against double, and the configuration (key, draws, weights.file, per-layer
// refusal). tests/reference/autograd_check.py holds the same gradients against torch autograd.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "backward_support.hpp"
#include "kernel/ops/mlp.hpp"
#include "kernel/model/parameters.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

namespace {

// The MLP weights of a d -> m -> d swiglu MLP with biases, drawn.
LayerWeights swiglu_weights(int d, int m, RandomStream& rng, bool bias = true) {
  LayerWeights w;
  w.mlp_in = gaussian(d, m, rng, 0.7);
  w.mlp_gate = gaussian(d, m, rng, 0.7);
  w.mlp_out = gaussian(m, d, rng, 0.5);
  if (bias) {
    w.mlp_in_bias = gaussian(1, m, rng, 0.3);
    w.mlp_out_bias = gaussian(1, d, rng, 0.3);
  }
  return w;
}

Matrix forward(const Matrix& X, const LayerWeights& w, MlpCacheT<double>* cache = nullptr) {
  MlpWorkspace ws;
  Matrix out;
  mlp_forward(X, w, MlpActivation::swiglu, ws, out, cache);
  return out;
}

}  // namespace

TEST_CASE("swiglu: the 1 x 2 case worked by hand", "[mlp][swiglu]") {
  // X = [1, 2], W_in = [[1, 0], [0, -1]], b_in = [0, 1]: Z = [1, -2] + [0, 1] = [1, -1];
  // W_gate = [[1, 1], [1, 0]]: U = X W_gate = [3, 1]; s = sigma(1) = 1 / (1 + e^-1) = 0.7310585786300049
  // (e = 2.718281828459045), silu(1) = s, silu(-1) = -sigma(-1) = -(1 - s);
  // H = silu(Z) .* U = [3 s, -(1 - s)]; W_out = [[1, 0], [2, 1]], b_out = [0, 0.25]:
  // M = [H1 + 2 H2, H2] + b_out = [5 s - 2, s - 0.75] = [1.6552928931500245, -0.0189414213699951].
  LayerWeights w;
  w.mlp_in.resize(2, 2), w.mlp_gate.resize(2, 2), w.mlp_out.resize(2, 2);
  w.mlp_in << 1, 0, 0, -1;
  w.mlp_gate << 1, 1, 1, 0;
  w.mlp_out << 1, 0, 2, 1;
  w.mlp_in_bias.resize(2), w.mlp_out_bias.resize(2);
  w.mlp_in_bias << 0, 1;
  w.mlp_out_bias << 0, 0.25;
  Matrix X(1, 2);
  X << 1, 2;
  const double s = 1.0 / (1.0 + std::exp(-1.0));
  CHECK_THAT(s, Catch::Matchers::WithinRel(0.7310585786300049, 1e-15));
  MlpCacheT<double> c;
  const Matrix M = forward(X, w, &c);
  CHECK_THAT(M(0, 0), Catch::Matchers::WithinRel(1.6552928931500245, 1e-15));
  CHECK_THAT(M(0, 1), Catch::Matchers::WithinRel(-0.0189414213699951, 1e-13));
  CHECK_THAT(M(0, 0), Catch::Matchers::WithinRel(5 * s - 2, 1e-15));
  CHECK_THAT(M(0, 1), Catch::Matchers::WithinRel(s - 0.75, 1e-15));
  // The cache: Z, U and H as above.
  CHECK((c.pre(0, 0) == 1.0 && c.pre(0, 1) == -1.0 && c.gate(0, 0) == 3.0 && c.gate(0, 1) == 1.0));
  CHECK_THAT(c.hidden(0, 0), Catch::Matchers::WithinRel(3 * s, 1e-15));
  CHECK_THAT(c.hidden(0, 1), Catch::Matchers::WithinRel(-(1 - s), 1e-15));
  // The activation itself is silu, its derivative sigma (1 + z (1 - sigma)): at 1, s (2 - s).
  CHECK_THAT(mlp_activation(1.0, MlpActivation::swiglu), Catch::Matchers::WithinRel(s, 1e-15));
  CHECK_THAT(activation_derivative(1.0, MlpActivation::swiglu), Catch::Matchers::WithinRel(s * (2 - s), 1e-15));
  // By hand, the adjoint for dM = [1, 0]: dH = dM W_out^T = [1, 2]; dZ = dH .* U .* silu'(Z) =
  // [3 s (2 - s), 2 silu'(-1)], silu'(-1) = sigma(-1) (1 - (1 - sigma(-1))) = (1 - s)^2; dU = dH .* silu(Z) =
  // [s, -2 (1 - s)].
  Matrix dM(1, 2);
  dM << 1, 0;
  MlpGrads g;
  const Matrix dX = mlp_backward(X, w, MlpActivation::swiglu, dM, g);
  const double dz0 = 3 * s * (2 - s), dz1 = 2 * (1 - s) * (1 - s), du0 = s, du1 = -2 * (1 - s);
  // dW_gate = X^T dU, dW_in = X^T dZ, dX = dZ W_in^T + dU W_gate^T = [dz0 + du0 + du1, -dz1 + du0].
  CHECK_THAT(g.d_gate(1, 1), Catch::Matchers::WithinRel(2 * du1, 1e-15));
  CHECK_THAT(g.d_gate(0, 0), Catch::Matchers::WithinRel(du0, 1e-15));
  CHECK_THAT(g.d_in(1, 0), Catch::Matchers::WithinRel(2 * dz0, 1e-15));
  CHECK_THAT(g.d_in_bias(0, 1), Catch::Matchers::WithinRel(dz1, 1e-15));
  CHECK_THAT(dX(0, 0), Catch::Matchers::WithinRel(dz0 + du0 + du1, 1e-14));
  CHECK_THAT(dX(0, 1), Catch::Matchers::WithinRel(-dz1 + du0, 1e-14));
  // Float: the same case in float arithmetic.
  LayerWeightsT<float> wf;
  cast_weights(w, wf);
  MlpWorkspaceT<float> wsf;
  MatrixF Mf;
  mlp_forward(MatrixF(X.cast<float>()), wf, MlpActivation::swiglu, wsf, Mf);
  CHECK_THAT(Mf(0, 0), Catch::Matchers::WithinRel(1.6552928931500245f, 1e-6f));
}

TEST_CASE("swiglu: the forward and adjoint against their formulas written out", "[mlp][swiglu]") {
  // M = (silu(a) .* u) W_out, a = X W_in, u = X W_gate; with dh = dM W_out^T: da = dh .* u .* silu'(a),
  // du = dh .* silu(a), dW_out = h^T dM (h = silu(a) .* u), dW_in = X^T da, dW_gate = X^T du,
  // dX = da W_in^T + du W_gate^T; silu'(a) = sigma(a) (1 + a (1 - sigma(a))).
  const int n = 7, d = 6, m = 10;
  RandomStream rng(45, 2);
  LayerWeights w;  // no biases: Llama has none
  w.mlp_in = gaussian(d, m, rng, 0.4), w.mlp_gate = gaussian(d, m, rng, 0.4), w.mlp_out = gaussian(m, d, rng, 0.4);
  const Matrix X = gaussian(n, d, rng), dOut = gaussian(n, d, rng);
  const Eigen::ArrayXXd a = (X * w.mlp_in).array(), u = (X * w.mlp_gate).array();
  const Eigen::ArrayXXd sigma = 1.0 / (1.0 + (-a).exp()), silu = a * sigma;
  const Matrix h = (silu * u).matrix();
  const Matrix want = h * w.mlp_out;
  MlpCacheT<double> c;
  const Matrix got = forward(X, w, &c);
  CHECK(rel_err(got, want) < 1e-15);
  CHECK(rel_err(want, 1.001 * want) > 1e-15);  // the tolerance tells a 1e-3 change
  const Eigen::ArrayXXd dh = (dOut * w.mlp_out.transpose()).array();
  const Matrix da = (dh * u * sigma * (1.0 + a * (1.0 - sigma))).matrix(), du = (dh * silu).matrix();
  MlpGrads g;
  const Matrix dX = mlp_backward<double>(X, w, MlpActivation::swiglu, c, dOut, g);
  CHECK(rel_err(dX, Matrix(da * w.mlp_in.transpose() + du * w.mlp_gate.transpose())) < 1e-14);
  CHECK(rel_err(g.d_in, Matrix(X.transpose() * da)) < 1e-14);
  CHECK(rel_err(g.d_gate, Matrix(X.transpose() * du)) < 1e-14);
  CHECK(rel_err(g.d_out, Matrix(h.transpose() * dOut)) < 1e-14);
}

TEST_CASE("swiglu: adjoint and tangent of the MLP against finite differences", "[mlp][swiglu][backward]") {
  const int n = 5, d = 4, m = 6;
  RandomStream rng(45, 3);
  LayerWeights w = swiglu_weights(d, m, rng);
  Matrix X = gaussian(n, d, rng);
  const Matrix C = gaussian(n, d, rng), V = gaussian(n, d, rng);
  const auto loss = [&] { return forward(X, w).cwiseProduct(C).sum(); };
  MlpGrads g;
  const Matrix dX = mlp_backward(X, w, MlpActivation::swiglu, C, g);
  const double errs[] = {rel_err(dX, fd_gradient(X, loss)),
                         rel_err(g.d_in, fd_gradient(w.mlp_in, loss)),
                         rel_err(g.d_gate, fd_gradient(w.mlp_gate, loss)),
                         rel_err(g.d_out, fd_gradient(w.mlp_out, loss)),
                         rel_err(g.d_in_bias, fd_gradient_row(w.mlp_in_bias, loss)),
                         rel_err(g.d_out_bias, fd_gradient_row(w.mlp_out_bias, loss))};
  for (const double e : errs) CHECK(e < kTol);
  WARN("swiglu MLP adjoint: largest relative error against FD " << *std::max_element(std::begin(errs), std::end(errs)));
  // A gradient of W_gate that ignored the gate's own path (dU = 0) is caught.
  CHECK(rel_err(Matrix::Zero(d, m), fd_gradient(w.mlp_gate, loss)) > kTol);
  // The tangent along V against fourth-order differences, and <C, J V> = <J^T C, V>.
  MlpCacheT<double> c;
  forward(X, w, &c);
  const Matrix jv = mlp_jvp<double>(w, MlpActivation::swiglu, c, V);
  const double h = 1e-4;
  const Matrix fd = (8 * (forward(X + h * V, w) - forward(X - h * V, w)) -
                     (forward(X + 2 * h * V, w) - forward(X - 2 * h * V, w))) / (12 * h);
  CHECK(rel_err(jv, fd) < kTol);
  CHECK(std::abs(C.cwiseProduct(jv).sum() - dX.cwiseProduct(V).sum()) < 1e-13 * C.norm() * jv.norm());
  // Without its gate the operation refuses (the gate is never silently taken as zero or one).
  LayerWeights bare = w;
  bare.mlp_gate.resize(0, 0);
  CHECK_THROWS_WITH(forward(X, bare), Catch::Contains("W_gate"));
}

TEST_CASE("swiglu: stacks of blocks against finite differences (every placement)", "[mlp][swiglu][backward]") {
  for (const NormPosition pos : {NormPosition::post, NormPosition::pre, NormPosition::peri, NormPosition::ngpt}) {
    Case k;
    k.m = 5, k.dv = 3, k.act = MlpActivation::swiglu, k.pos = pos;
    k.norm = pos == NormPosition::ngpt ? NormType::sphere : NormType::rmsnorm;
    k.mlp_bias = pos != NormPosition::pre;  // Llama's block: pre-RMSNorm, no biases
    const StackCheck r = check_stack(k, "causal", 2, 4500 + static_cast<std::uint64_t>(pos));
    INFO("norm.position " << pos_name(pos));
    CHECK(r.w_gate > 0.0);  // measured
    CHECK(r.worst() < kTol);
    WARN("swiglu stack, " << pos_name(pos) << ": largest relative error against FD " << r.worst() << " (W_gate "
                          << r.w_gate << ")");
    // The block's tangent and its dot-product test with the adjoint.
    RandomStream rng(4510 + static_cast<std::uint64_t>(pos), 0);
    Fixture f(k, backward_test_mask("causal", k.N));
    const LayerWeights w = random_weights(k, rng);
    const Matrix X = gaussian(k.N, k.d, rng), C = gaussian(k.N, k.d, rng), V = gaussian(k.N, k.d, rng);
    const BlockDerivativeCheck b = check_block_derivatives(k, X, w, f.p, C, V);
    CHECK(b.dX < kTol);
    CHECK(b.jvp < kTol);
    CHECK(b.dot < 1e-12);
    CHECK(b.grads.mlp.d_gate.rows() == k.d);
    CHECK(b.grads.mlp.d_gate.cols() == k.m);
  }
}

TEST_CASE("swiglu: float32 against double to 1e-5", "[mlp][swiglu][float32]") {
  const int n = 6, d = 8, m = 12;
  RandomStream rng(45, 5);
  const LayerWeights w = swiglu_weights(d, m, rng);
  const Matrix X = gaussian(n, d, rng), C = gaussian(n, d, rng), V = gaussian(n, d, rng);
  LayerWeightsT<float> wf;
  cast_weights(w, wf);
  REQUIRE(wf.mlp_gate.rows() == d);
  const MatrixF Xf = X.cast<float>(), Cf = C.cast<float>(), Vf = V.cast<float>();
  MlpCacheT<double> c;
  const Matrix M = forward(X, w, &c);
  MlpWorkspaceT<float> wsf;
  MatrixF Mf;
  MlpCacheT<float> cf;
  mlp_forward(Xf, wf, MlpActivation::swiglu, wsf, Mf, &cf);
  CHECK(rel_err(Mf.cast<double>(), M) < 1e-5);
  MlpGrads g;
  MlpGradsT<float> gf;
  const Matrix dX = mlp_backward<double>(X, w, MlpActivation::swiglu, c, C, g);
  const MatrixF dXf = mlp_backward<float>(Xf, wf, MlpActivation::swiglu, cf, Cf, gf);
  CHECK(rel_err(dXf.cast<double>(), dX) < 1e-5);
  CHECK(rel_err(gf.d_gate.cast<double>(), g.d_gate) < 1e-5);
  CHECK(rel_err(gf.d_in.cast<double>(), g.d_in) < 1e-5);
  CHECK(rel_err(gf.d_out.cast<double>(), g.d_out) < 1e-5);
  CHECK(rel_err(gf.d_in_bias.cast<double>(), g.d_in_bias) < 1e-5);
  const Matrix jv = mlp_jvp<double>(w, MlpActivation::swiglu, c, V);
  CHECK(rel_err(mlp_jvp<float>(wf, MlpActivation::swiglu, cf, Vf).cast<double>(), jv) < 1e-5);
  // A whole block's reverse pass in float (run.precision = float32) against double.
  Case k;
  k.m = m, k.d = d, k.N = n, k.act = MlpActivation::swiglu, k.norm = NormType::rmsnorm;
  Fixture f(k, backward_test_mask("causal", k.N));
  RandomStream r2(45, 6);
  const LayerWeights wb = random_weights(k, r2);
  const Matrix Xr = Xf.cast<double>();  // float values exactly, as the float32 run's tokens
  BlockGrads gd, gs;
  block_backward(Xr, wb, f.p, C, gd);
  BlockParams single = f.p;
  single.single = true;
  block_backward(Xr, wb, single, C, gs);
  CHECK(rel_err(gs.mlp.d_gate, gd.mlp.d_gate) < 1e-5);
  CHECK(rel_err(gs.dX, gd.dX) < 1e-5);
  WARN("swiglu float32 against float64: M " << rel_err(Mf.cast<double>(), M) << ", dW_gate "
                                            << rel_err(gf.d_gate.cast<double>(), g.d_gate) << ", block dW_gate "
                                            << rel_err(gs.mlp.d_gate, gd.mlp.d_gate));
}

TEST_CASE("swiglu: the key, the draws of W_gate, weights.file and the per-layer refusal", "[mlp][swiglu][config]") {
  const std::map<std::string, std::string> base = {{"model.dim", "4"}, {"model.tokens", "3"}, {"model.layers", "2"},
                                                   {"mlp.width", "3"}, {"run.trials", "1"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    std::map<std::string, std::string> v = base;
    for (const auto& kv : extra) v[kv.first] = kv.second;
    return make_config(v);
  };
  const Config gelu = with({}), swiglu = with({{"mlp.activation", "swiglu"}});
  CHECK(swiglu.mlp.activation == MlpActivation::swiglu);
  const InputArrays none;
  WeightSampler sg(gelu, none), ss(swiglu, none);
  RandomStream rg(7, 0), rs(7, 0);
  sg.begin_trial(rg), ss.begin_trial(rs);
  const LayerWeights wg = sg.layer(0, rg), ws = ss.layer(0, rs);
  // W_in drawn as before; W_gate right after it with W_in's std 1/sqrt(d) = 1/2, so that its
  // normal deviates are those the other activations give W_out (std 1/sqrt(m)), drawn next there.
  CHECK(gelu.weights.mlp_in_std == 0.5);
  CHECK(wg.mlp_gate.size() == 0);
  REQUIRE((ws.mlp_gate.rows() == 4 && ws.mlp_gate.cols() == 3));
  CHECK(ws.mlp_in == wg.mlp_in);
  const double ratio = gelu.weights.mlp_in_std / gelu.weights.mlp_out_std;
  for (Eigen::Index k = 0; k < 12; ++k)  // the k-th draw of each, row by row (the order of fill_normal)
    CHECK_THAT(ws.mlp_gate(k / 3, k % 3), Catch::Matchers::WithinRel(wg.mlp_out(k / 4, k % 4) * ratio, 1e-15));
  CHECK(ws.mlp_out != wg.mlp_out);
  // weights.mlp = zero: the gate too.
  const Config zero = with({{"mlp.activation", "swiglu"}, {"weights.mlp", "zero"}});  // outlives the sampler
  WeightSampler sz(zero, none);
  sz.begin_trial(rs);
  CHECK(sz.layer(0, rs).mlp_gate == Matrix::Zero(4, 3));
  // The parameters' table: W_gate in the gradients and in weights.file after W_in, [d, m] or [L, d, m].
  CHECK(parameter_dims(swiglu).mlp_gate);
  CHECK_FALSE(parameter_dims(gelu).mlp_gate);
  Config file = with({{"mlp.activation", "swiglu"}, {"weights.mlp", "file"}, {"weights.file", "w.h5"}});
  InputArrays in;
  std::vector<std::string> names;
  for (const InputRequirement& r : input_requirements(file, in)) {
    names.push_back(r.dataset);
    if (r.dataset == "W_gate") {
      CHECK(r.shapes == std::vector<Extents>{{4, 3}, {2, 4, 3}});
      CHECK(r.target == &in.w_gate);
    }
  }
  CHECK(names == std::vector<std::string>{"W_in", "W_gate", "W_out"});
  // Read from the file's array (here given as host arrays), layer by layer.
  in.w_gate = NdArray{{2, 4, 3}, std::vector<double>(24)};
  for (std::size_t i = 0; i < 24; ++i) in.w_gate->data[i] = static_cast<double>(i);
  in.w_in = NdArray{{4, 3}, std::vector<double>(12, 0.5)};
  in.w_out = NdArray{{3, 4}, std::vector<double>(12, 0.25)};
  WeightSampler sf(file, in);
  sf.begin_trial(rs);
  sf.layer(0, rs);
  const LayerWeights& w1 = sf.layer(1, rs);
  CHECK(w1.mlp_gate(0, 0) == 12.0);  // layer 1's block, C order: [1, 0, 0]
  CHECK(w1.mlp_gate(1, 2) == 17.0);  // [1, 1, 2] = 12 + 3 + 2
  // A range cannot switch the gate on or off; other activations per range still can.
  CHECK_THROWS_WITH(with({{"model.layer_overrides", "1:mlp.activation=swiglu"}}),
                    Catch::Contains("mlp.activation = swiglu") && Catch::Contains("cannot differ by layer"));
  CHECK_THROWS_WITH(with({{"mlp.activation", "swiglu"}, {"model.layer_overrides", "0:mlp.activation=gelu"}}),
                    Catch::Contains("cannot differ by layer"));
  CHECK_NOTHROW(with({{"model.layer_overrides", "1:mlp.activation=relu"}}));
}
