// The Llama model on hand-worked cases and properties: rotary position embedding (kernel/ops/rotary.hpp),
// one Llama block on two tokens against its formula written out (the mapping onto the main block,
// kernel/llama/llama_block.hpp), decoding one token at a time (kernel/llama/decoder.hpp) equals the
// whole sequence, the token
// choice of generation. (RMSNorm, grouped-query attention and the gated MLP are the main kernel's,
// tested with it: test_normalization, test_kv_heads, test_mlp.)
#include <catch2/catch.hpp>

#include <cmath>

#include "kernel/llama/decoder.hpp"
#include "kernel/llama/generation.hpp"
#include "kernel/llama/llama_forward.hpp"
#include "kernel/ops/rotary.hpp"
#include "kernel/model/random.hpp"

using namespace rcsim;
using namespace rcsim::llama;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

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

namespace {

// y = g * x / sqrt(mean(x^2) + eps), row by row (llama2.c's rmsnorm).
Matrix rms(const Matrix& X, const Vector& g, double eps) {
  Matrix Y = X;
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    Y.row(i) = X.row(i).cwiseProduct(g.transpose()) / std::sqrt(X.row(i).squaredNorm() / X.cols() + eps);
  return Y;
}

}  // namespace

TEST_CASE("llama block as the main block: two tokens against the block's formula written out", "[llama]") {
  // One block, 4 query heads on 2 key/value heads of size 2, gains away from 1. Token 1 (position 1)
  // attends to keys 0 and 1: q = rope(H_1 Wq_h^T, 1), k_0 = H_0 Wk_g^T (position 0: no rotation),
  // k_1 = rope(H_1 Wk_g^T, 1), weights softmax(q . k / sqrt(2)); then + att Wo^T and the SwiGLU.
  LlamaConfig c;
  c.dim = 8, c.hidden = 6, c.layers = 1, c.heads = 4, c.kv_heads = 2, c.vocab = 5, c.seq_len = 4;
  LlamaModel m = random_model(c, 17);
  RandomStream rng(18, 0);
  Vector shift(8);
  rng.fill_normal(shift, 0.3);
  m.blocks[0].attn_norm += shift;
  m.blocks[0].mlp_norm -= shift;
  const LlamaBlock& b = m.blocks[0];
  const Matrix X = embed(m, {3, 1});
  const Matrix H = rms(X, b.attn_norm, c.norm_eps);
  Matrix Q = H * b.wq.transpose(), K = H * b.wk.transpose();
  const Matrix V = H * b.wv.transpose();
  for (int col = 0; col < 8; col += 2) {  // rotate token 1's pairs by 1 * 10000^(-2j/2), j = (col mod 2) / 2 = 0
    const double phi = 1.0, a = Q(1, col), bq = Q(1, col + 1);
    Q(1, col) = a * std::cos(phi) - bq * std::sin(phi), Q(1, col + 1) = a * std::sin(phi) + bq * std::cos(phi);
    if (col < 4) {
      const double ak = K(1, col), bk = K(1, col + 1);
      K(1, col) = ak * std::cos(phi) - bk * std::sin(phi), K(1, col + 1) = ak * std::sin(phi) + bk * std::cos(phi);
    }
  }
  RowVector att(8);
  for (int h = 0; h < 4; ++h) {
    const int g = h / 2;
    const double s0 = Q.block(1, 2 * h, 1, 2).cwiseProduct(K.block(0, 2 * g, 1, 2)).sum() / std::sqrt(2.0);
    const double s1 = Q.block(1, 2 * h, 1, 2).cwiseProduct(K.block(1, 2 * g, 1, 2)).sum() / std::sqrt(2.0);
    const double w0 = 1.0 / (1.0 + std::exp(s1 - s0)), w1 = 1.0 - w0;
    att.segment(2 * h, 2) = w0 * V.block(0, 2 * g, 1, 2) + w1 * V.block(1, 2 * g, 1, 2);
  }
  const RowVector mid = X.row(1) + att * b.wo.transpose();
  const Matrix H2 = rms(Matrix(mid), b.mlp_norm, c.norm_eps);
  const Matrix gate = H2 * b.w1.transpose(), up = H2 * b.w3.transpose();
  const Matrix silu = gate.array() / (1.0 + (-gate.array()).exp());
  const RowVector want = mid + Matrix(silu.cwiseProduct(up)) * b.w2.transpose();
  const std::vector<Matrix> states = sequence_states(m, {3, 1}, false);
  REQUIRE(states.size() == 2);
  CHECK((states[1].row(1) - want).cwiseAbs().maxCoeff() < 1e-13 * want.cwiseAbs().maxCoeff());
}

TEST_CASE("llama decoding one token at a time with the key/value cache equals the whole sequence", "[llama]") {
  LlamaConfig c;
  c.dim = 8, c.hidden = 12, c.layers = 3, c.heads = 4, c.kv_heads = 2, c.vocab = 11, c.seq_len = 16;
  const LlamaModel m = random_model(c, 9);
  const std::vector<int> ids = {1, 4, 4, 10, 0, 7};
  const Matrix whole = sequence_logits(m, ids, false);
  for (const ForwardOptions o : {ForwardOptions{}, ForwardOptions{false, 0}, ForwardOptions{true, 5}}) {
    const Matrix whole_o = sequence_logits(m, ids, false, o);
    Decoder<double> decoder(m, o);  // the key/value cache against the main block on the whole sequence
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const RowVector row = decoder.feed(ids[i]);
      CHECK((row - whole_o.row(static_cast<Eigen::Index>(i))).cwiseAbs().maxCoeff() < 1e-12);
    }
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
