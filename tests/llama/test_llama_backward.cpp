// The Llama stack's derivative passes (the main block's adjoints and tangents on the stack of
// kernel/llama/llama_block.hpp) against central finite differences of the production forward
// along several random directions, the adjoint against the tangent (<C, J v> = <J^T C, v>), the
// rotary transpose against the rotation, and the cross-entropy against the logits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>

#include "kernel/llama/llama_backward.hpp"
#include "kernel/ops/rotary.hpp"
#include "kernel/model/random.hpp"

using namespace rcsim;
using namespace rcsim::llama;

namespace {

// The five-point central difference (f(-2h) - 8 f(-h) + 8 f(h) - f(2h)) / 12h: truncation error
// ~ h^4 |f^(5)| / 30, rounding ~ eps |f| / h; h = 1e-4 keeps both near 1e-11 relative here.
constexpr double kStep = 1e-4;
constexpr double kTol = 1e-8;  // relative

Matrix gaussian(RandomStream& rng, Eigen::Index rows, Eigen::Index cols, double scale = 1.0) {
  Matrix m(rows, cols);
  rng.fill_normal(m, scale);
  return m;
}
Vector gaussian_vector(RandomStream& rng, Eigen::Index n, double scale = 1.0) {
  return gaussian(rng, n, 1, scale).col(0);
}

// |a - b| / max(|a|, |b|, 1e-300).
double relative(double a, double b) { return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-300}); }

// The five-point central difference of a scalar function of the step at 0.
double central(const std::function<double(double)>& f) {
  return (8 * (f(kStep) - f(-kStep)) - (f(2 * kStep) - f(-2 * kStep))) / (12 * kStep);
}

double inner(const Matrix& a, const Matrix& b) { return a.cwiseProduct(b).sum(); }

LlamaConfig small_config() {
  LlamaConfig c;
  c.dim = 8, c.hidden = 12, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.vocab = 11, c.seq_len = 16;
  return c;
}

// A random model with gains away from 1 (so that the gain gradients are tested at general gains).
LlamaModel test_model(unsigned long long seed) {
  LlamaModel m = random_model(small_config(), seed);
  RandomStream rng(seed, 1);
  for (auto& b : m.blocks) {
    b.attn_norm += gaussian_vector(rng, m.config.dim, 0.3);
    b.mlp_norm += gaussian_vector(rng, m.config.dim, 0.3);
  }
  m.final_norm += gaussian_vector(rng, m.config.dim, 0.3);
  m.classifier += gaussian(rng, m.config.vocab, m.config.dim, 0.3);  // as if not shared
  return m;
}

// m + h D over the blocks, the final gain and the classifier (the embedding is X(0)'s, perturbed apart).
LlamaModel shifted(const LlamaModel& m, const LlamaModel& D, double h) {
  LlamaModel r = m;
  for (std::size_t l = 0; l < m.blocks.size(); ++l) {
    auto& a = r.blocks[l];
    const auto& d = D.blocks[l];
    a.attn_norm += h * d.attn_norm, a.mlp_norm += h * d.mlp_norm;
    a.wq += h * d.wq, a.wk += h * d.wk, a.wv += h * d.wv, a.wo += h * d.wo;
    a.w1 += h * d.w1, a.w2 += h * d.w2, a.w3 += h * d.w3;
  }
  r.final_norm += h * D.final_norm;
  r.classifier += h * D.classifier;
  return r;
}

// <gradients, D> over the blocks (and the final gain and the classifier where computed).
double directional(const LlamaGradients& g, const LlamaModel& D) {
  double s = 0;
  for (std::size_t l = 0; l < D.blocks.size(); ++l) {
    const auto &a = g.blocks[l], &d = D.blocks[l];
    s += a.attn_norm.dot(d.attn_norm) + a.mlp_norm.dot(d.mlp_norm) + inner(a.wq, d.wq) + inner(a.wk, d.wk) +
         inner(a.wv, d.wv) + inner(a.wo, d.wo) + inner(a.w1, d.w1) + inner(a.w2, d.w2) + inner(a.w3, d.w3);
  }
  if (g.final_norm.size()) s += g.final_norm.dot(D.final_norm);
  if (g.classifier.size()) s += inner(g.classifier, D.classifier);
  return s;
}

}  // namespace

TEST_CASE("llama rotary transpose is the inverse rotation and the adjoint", "[llama]") {
  RandomStream rng(22, 0);
  const Matrix X = gaussian(rng, 6, 16), Y = gaussian(rng, 6, 16);
  Matrix RX = X, RtY = Y;
  apply_rotary(RX, 8, 3, 10000.0);
  apply_rotary_transpose(RtY, 8, 3, 10000.0);
  CHECK(relative(inner(RX, Y), inner(X, RtY)) < 1e-14);  // <R x, y> = <x, R^T y>
  apply_rotary_transpose(RX, 8, 3, 10000.0);
  CHECK((RX - X).cwiseAbs().maxCoeff() < 1e-14);  // R^T R = 1
  // A rotation by minus the angle by hand: the pair (1, 0) at position 2, j = 0 -> (cos 2, -sin 2).
  Matrix e = Matrix::Zero(1, 4);
  e(0, 0) = 1;
  apply_rotary_transpose(e, 4, 2, 10000.0);
  CHECK(std::abs(e(0, 0) - std::cos(2.0)) < 1e-15);
  CHECK(std::abs(e(0, 1) + std::sin(2.0)) < 1e-15);
}

TEST_CASE("llama stack gradients wrt X(0) and every weight against finite differences", "[llama]") {
  const LlamaModel m = test_model(31);
  RandomStream rng(32, 0);
  const Matrix X0 = embed(m, {1, 4, 4, 10, 0, 7});
  for (const ForwardOptions o : {ForwardOptions{}, ForwardOptions{false, 0}, ForwardOptions{true, 5}}) {
    for (int k = 0; k < 3; ++k) {
      const Matrix C = gaussian(rng, X0.rows(), X0.cols()), V = gaussian(rng, X0.rows(), X0.cols());
      const LlamaModel D = test_model(100 + k);  // a direction in weight space
      const LlamaGradients g = stack_gradients(m, X0, C, o);
      const auto loss = [&](const LlamaModel& mm, const Matrix& X) { return stack_gradients(mm, X, C, o).loss; };
      const double fd_x = central([&](double h) { return loss(m, X0 + h * V); });
      const double fd_w = central([&](double h) { return loss(shifted(m, D, h), X0); });
      CHECK(relative(fd_x, inner(g.dstates[0], V)) < kTol);
      CHECK(relative(fd_w, directional(g, D)) < kTol);
      const Matrix J = stack_tangent(m, X0, V, o);
      CHECK(relative(fd_x, inner(C, J)) < kTol);
      CHECK(relative(inner(C, J), inner(g.dstates[0], V)) < 1e-12);
    }
  }
  // dL/dX(t) for every t: the gradient through blocks t+1 .. depth alone (a block's FD at X(t)).
  const Matrix C = gaussian(rng, X0.rows(), X0.cols());
  const LlamaGradients g = stack_gradients(m, X0, C);
  CHECK(g.dstates.size() == 3);
  CHECK(g.dstates[2] == C);
  CHECK(g.blocks[1].attn_norm.size() == 8);
}

TEST_CASE("llama cross-entropy gradients against finite differences and the logits", "[llama]") {
  const LlamaModel m = test_model(41);
  const std::vector<int> ids = {1, 4, 4, 10, 0, 7}, targets = {4, 4, 10, -1, 7, 3};
  const Matrix logits = sequence_logits(m, ids, false);
  double want = 0;  // -sum log softmax from the production logits
  for (std::size_t t = 0; t < ids.size(); ++t)
    if (targets[t] >= 0)
      want -= logits(static_cast<Eigen::Index>(t), targets[t]) -
              std::log(logits.row(static_cast<Eigen::Index>(t)).array().exp().sum());
  for (const ForwardOptions o : {ForwardOptions{}, ForwardOptions{false, 0}}) {
    const LlamaGradients g = loss_gradients(m, ids, targets, o);
    if (o.norm) CHECK(relative(g.loss, want) < 1e-13);
    for (int k = 0; k < 3; ++k) {
      const LlamaModel D = test_model(200 + k);
      const double fd = central([&](double h) { return loss_gradients(shifted(m, D, h), ids, targets, o).loss; });
      CHECK(relative(fd, directional(g, D)) < kTol);
    }
  }
  CHECK_THROWS_WITH(loss_gradients(m, ids, {1, 2}), Catch::Contains("targets has 2 entries"));
  CHECK_THROWS_WITH(loss_gradients(m, ids, {1, 2, 3, 4, 5, 11}), Catch::Contains("target 11 at position 5"));
}
