// The Llama reverse pass in float32 (stack_gradients, loss_gradients with `single`) against the
// float64 one, which tests/llama/test_llama_backward.cpp checks against finite differences at 1e-8:
// every gradient within 1e-4 relative (Frobenius, per array), and not equal to it (float
// arithmetic was used), on a small random model and on the shipped stories260K.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "io/llama_checkpoint.hpp"
#include "kernel/llama/llama_backward.hpp"
#include "kernel/model/random.hpp"

using namespace rcsim;
using namespace rcsim::llama;

namespace {

constexpr double kFloatTol = 1e-4;  // relative, as the block's float32 reverse pass (tests/test_backward_float32.cpp)

// The worst and the least relative difference ||f - d||_F / ||d||_F over the arrays compared.
struct Gap {
  double worst = 0.0, least = 1e300;
  template <class M>
  void add(const M& f, const M& d) {
    if (d.size() == 0) return;
    const double e = (f - d).norm() / d.norm();
    worst = std::max(worst, e);
    least = std::min(least, e);
  }
};

Gap float_vs_double(const LlamaGradients& f, const LlamaGradients& d) {
  Gap g;
  REQUIRE(f.blocks.size() == d.blocks.size());
  REQUIRE(f.dstates.size() == d.dstates.size());
  for (std::size_t t = 0; t < d.dstates.size(); ++t) g.add(f.dstates[t], d.dstates[t]);
  for (std::size_t l = 0; l < d.blocks.size(); ++l) {
    const auto &a = f.blocks[l], &b = d.blocks[l];
    g.add(a.attn_norm, b.attn_norm), g.add(a.mlp_norm, b.mlp_norm);
    g.add(a.wq, b.wq), g.add(a.wk, b.wk), g.add(a.wv, b.wv), g.add(a.wo, b.wo);
    g.add(a.w1, b.w1), g.add(a.w2, b.w2), g.add(a.w3, b.w3);
  }
  g.add(f.final_norm, d.final_norm);
  g.add(f.classifier, d.classifier);
  return g;
}

LlamaConfig small_config() {
  LlamaConfig c;
  c.dim = 8, c.hidden = 12, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.vocab = 11, c.seq_len = 16;
  return c;
}

}  // namespace

TEST_CASE("llama float32 reverse pass against float64, small model", "[llama][float32]") {
  const LlamaModel m = random_model(small_config(), 51);
  const std::vector<int> ids = {1, 4, 4, 10, 0, 7}, targets = {4, 4, 10, -1, 7, 3};
  RandomStream rng(52, 0);
  const Matrix X0 = embed(m, ids);
  Matrix C(X0.rows(), X0.cols());
  rng.fill_normal(C);
  for (const ForwardOptions o : {ForwardOptions{}, ForwardOptions{false, 0}, ForwardOptions{true, 5}}) {
    const Gap s = float_vs_double(stack_gradients(m, X0, C, o, true), stack_gradients(m, X0, C, o));
    INFO("stack: norm " << o.norm << ", depth " << o.depth << ": worst " << s.worst << ", least " << s.least);
    CHECK(s.worst < kFloatTol);
    CHECK(s.least > 1e-10);
    const LlamaGradients lf = loss_gradients(m, ids, targets, o, true), ld = loss_gradients(m, ids, targets, o);
    const Gap l = float_vs_double(lf, ld);
    INFO("cross-entropy: worst " << l.worst << ", least " << l.least);
    CHECK(l.worst < kFloatTol);
    CHECK(l.least > 1e-10);
    CHECK(std::abs(lf.loss - ld.loss) < kFloatTol * std::abs(ld.loss));
  }
  CHECK_THROWS_WITH(loss_gradients(m, ids, {1, 2}, {}, true), Catch::Contains("targets has 2 entries"));
}

TEST_CASE("llama float32 reverse pass against float64, stories260K", "[llama][float32]") {
  const LlamaCheckpoint ck =
      read_llama_checkpoint(std::string(RCSIM_SOURCE_DIR) + "/configs/models/stories260K/stories260K.bin");
  std::vector<int> ids = {1}, targets;
  for (int t = 1; t < 24; ++t) ids.push_back((37 * t + 11) % ck.model.config.vocab);
  for (std::size_t t = 1; t < ids.size(); ++t) targets.push_back(ids[t]);
  targets.push_back(-1);
  const LlamaGradients f = loss_gradients(ck.model, ids, targets, {}, true), d = loss_gradients(ck.model, ids, targets);
  const Gap g = float_vs_double(f, d);
  INFO("worst " << g.worst << ", least " << g.least);
  CHECK(g.worst < kFloatTol);
  CHECK(g.least > 1e-10);
}
