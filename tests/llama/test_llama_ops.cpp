// The Llama operations (sim/kernel/llama/) on hand-worked cases and properties: RMSNorm,
// rotary position embedding, causal grouped-query attention, SwiGLU, the key/value cache (one
// token at a time equals the whole sequence), the token choice of generation.
#include <catch2/catch.hpp>

#include <cmath>

#include "kernel/llama/generation.hpp"
#include "kernel/llama/gqa_attention.hpp"
#include "kernel/llama/llama_forward.hpp"
#include "kernel/llama/rms_norm.hpp"
#include "kernel/llama/rotary.hpp"
#include "kernel/llama/swiglu.hpp"
#include "kernel/model/random.hpp"

using namespace rcsim;
using namespace rcsim::llama;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

TEST_CASE("llama RMSNorm of one row worked by hand", "[llama]") {
  // x = (1, 2, 3, 6): mean(x^2) = 50/4 = 12.5; eps 0.5 -> scale 1/sqrt(13); gain (1, 2, 3, 4).
  Matrix x(1, 4);
  x << 1, 2, 3, 6;
  Vector g(4);
  g << 1, 2, 3, 4;
  const Matrix y = rms_norm(x, g, 0.5);
  const double s = 1.0 / std::sqrt(13.0);
  CHECK_THAT(y(0, 0), WithinRel(1 * s, 1e-15));
  CHECK_THAT(y(0, 3), WithinRel(24 * s, 1e-15));
  // eps 1e-5 as llama2.c: a row of norm sqrt(d) comes out almost unchanged with unit gain.
  const Matrix ones = Matrix::Ones(2, 8);
  CHECK_THAT(rms_norm(ones, Vector(Vector::Ones(8)), 1e-5)(1, 7), WithinRel(1.0 / std::sqrt(1.0 + 1e-5), 1e-15));
}

TEST_CASE("llama rotary embedding rotates adjacent pairs by pos * theta^(-2j/s)", "[llama]") {
  // Two heads of size 4 (pairs j = 0, 1), theta 100: the pair (1, 0) of pair j at position p
  // becomes (cos phi, sin phi), phi = p * 100^(-2j/4) = p / 10^j.
  Matrix x = Matrix::Zero(3, 8);
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 8; c += 2) x(i, c) = 1.0;
  apply_rotary(x, 4, 5, 100.0);  // rows at positions 5, 6, 7
  for (int i = 0; i < 3; ++i)
    for (int head = 0; head < 2; ++head)
      for (int j = 0; j < 2; ++j) {
        const double phi = (5 + i) / std::pow(10.0, j);
        CHECK_THAT(x(i, head * 4 + 2 * j), WithinAbs(std::cos(phi), 1e-15));
        CHECK_THAT(x(i, head * 4 + 2 * j + 1), WithinAbs(std::sin(phi), 1e-15));
      }
  // Position 0 is the identity; the rotation keeps each pair's length and q.k depends only on
  // the difference of positions (the relative encoding).
  RandomStream rng(3, 0);
  Matrix q(1, 8), k(1, 8);
  rng.fill_normal(q);
  rng.fill_normal(k);
  Matrix q0 = q;
  apply_rotary(q0, 8, 0, 10000.0);
  CHECK(q0 == q);
  Matrix qa = q, ka = k, qb = q, kb = k;
  apply_rotary(qa, 8, 7, 10000.0);
  apply_rotary(ka, 8, 3, 10000.0);
  apply_rotary(qb, 8, 14, 10000.0);
  apply_rotary(kb, 8, 10, 10000.0);
  CHECK_THAT(qa.squaredNorm(), WithinRel(q.squaredNorm(), 1e-14));
  CHECK_THAT(qa.row(0).dot(ka.row(0)), WithinRel(qb.row(0).dot(kb.row(0)), 1e-12));
}

TEST_CASE("llama grouped-query attention: causal averages and the shared key/value heads", "[llama]") {
  // 4 query heads, 2 kv heads, head size 1; zero queries: uniform weights over the visible keys,
  // so row i of head h is the mean of v_g(0..i), g = h / 2.
  Matrix Q = Matrix::Zero(3, 4), K = Matrix::Ones(3, 2), V(3, 2);
  V << 1, 10, 2, 20, 6, 60;
  const Matrix out = gqa_attention(Q, K, V, 4, 2, 0);
  CHECK_THAT(out(0, 0), WithinAbs(1.0, 1e-15));
  CHECK_THAT(out(1, 1), WithinAbs(1.5, 1e-15));
  CHECK_THAT(out(2, 2), WithinAbs(30.0, 1e-13));
  CHECK_THAT(out(2, 3), WithinAbs(30.0, 1e-13));
  // Two keys, scores q k / sqrt(s): query 1 (position 1 of a cache of 2) with q = (ln 3) * sqrt 2,
  // keys 0 and 1 (head size 2: k = (1, 0) and (0, 0)): weights 3/4 and 1/4.
  Matrix q1(1, 2), K2(2, 2), V2(2, 2);
  q1 << std::log(3.0) * std::sqrt(2.0), 0;
  K2 << 1, 0, 0, 0;
  V2 << 4, 0, 0, 8;
  const Matrix o = gqa_attention(q1, K2, V2, 1, 1, 1);
  CHECK_THAT(o(0, 0), WithinAbs(3.0, 1e-14));
  CHECK_THAT(o(0, 1), WithinAbs(2.0, 1e-14));
}

TEST_CASE("llama SwiGLU worked by hand", "[llama]") {
  // d = 1, m = 2: x = 2, W1 = (1, -1)^T, W3 = (3, 0.5)^T, W2 = (1, 2):
  // silu(2) * 6 + 2 * silu(-2) * 1 = 6 * 2 / (1 + e^-2) - 4 / (1 + e^2).
  Matrix x(1, 1), w1(2, 1), w3(2, 1), w2(1, 2);
  x << 2;
  w1 << 1, -1;
  w3 << 3, 0.5;
  w2 << 1, 2;
  const double want = 12.0 / (1.0 + std::exp(-2.0)) - 4.0 / (1.0 + std::exp(2.0));
  CHECK_THAT(swiglu(x, w1, w2, w3)(0, 0), WithinRel(want, 1e-15));
}

TEST_CASE("llama forward: one token at a time with the cache equals the whole sequence", "[llama]") {
  LlamaConfig c;
  c.dim = 8, c.hidden = 12, c.layers = 3, c.heads = 4, c.kv_heads = 2, c.vocab = 11, c.seq_len = 16;
  const LlamaModel m = random_model(c, 9);
  const std::vector<int> ids = {1, 4, 4, 10, 0, 7};
  const Matrix whole = sequence_logits(m, ids, false);
  KvCacheT<double> cache;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const Matrix x = forward_tokens(m, {ids[i]}, cache, {});
    const Matrix row = logits_of(m, x, {});
    CHECK((row.row(0) - whole.row(static_cast<Eigen::Index>(i))).cwiseAbs().maxCoeff() < 1e-12);
  }
  CHECK((sequence_logits(m, ids, true) - whole).cwiseAbs().maxCoeff() < 1e-4);  // float32
  // Causality: the first three rows do not depend on the later ids.
  const Matrix other = sequence_logits(m, {1, 4, 4, 2, 2, 2}, false);
  CHECK((other.topRows(3) - whole.topRows(3)).cwiseAbs().maxCoeff() == 0.0);
  // Depth 2L applies the blocks twice (the cyclic probe): X(2L) differs from X(L), X(L) the same.
  const auto states = sequence_states(m, ids, false, {true, 6});
  REQUIRE(states.size() == 7);
  CHECK(states[3] == sequence_states(m, ids, false).back());
  CHECK_THROWS_WITH(sequence_logits(m, {1, 11}, false), Catch::Contains("token id 11") && Catch::Contains("0 .. 10"));
  CHECK_THROWS_WITH(sequence_logits(m, std::vector<int>(17, 1), false), Catch::Contains("seq_len 16"));
}

TEST_CASE("llama token choice: greedy argmax, sampling by the inverse cumulative sum", "[llama]") {
  RowVector logits(3);
  logits << 0.0, std::log(3.0), 0.0;  // softmax (1/5, 3/5, 1/5)
  CHECK(choose_token(logits, 0.0, 0.5) == 1);
  CHECK(choose_token(logits, 1.0, 0.19) == 0);
  CHECK(choose_token(logits, 1.0, 0.21) == 1);
  CHECK(choose_token(logits, 1.0, 0.79) == 1);
  CHECK(choose_token(logits, 1.0, 0.81) == 2);
  // Temperature 1/2 squares the odds: (1, 9, 1)/11.
  CHECK(choose_token(logits, 0.5, 0.95) == 2);
  CHECK(choose_token(logits, 0.5, 0.85) == 1);
  RowVector tie(3);
  tie << 2.0, 2.0, 1.0;
  CHECK(choose_token(tie, 0.0, 0.0) == 0);  // the first on ties, as llama2.c
}
