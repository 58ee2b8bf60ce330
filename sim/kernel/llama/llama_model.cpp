#include "kernel/llama/llama_model.hpp"

#include <cmath>

#include "kernel/model/random.hpp"

namespace rcsim::llama {

std::string config_problem(const LlamaConfig& c) {
  const auto s = [](int v) { return std::to_string(v); };
  if (c.dim <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.vocab <= 0 ||
      c.seq_len <= 0)
    return "every size must be positive (dim " + s(c.dim) + ", hidden_dim " + s(c.hidden) + ", n_layers " +
           s(c.layers) + ", n_heads " + s(c.heads) + ", n_kv_heads " + s(c.kv_heads) + ", vocab_size " + s(c.vocab) +
           ", seq_len " + s(c.seq_len) + ")";
  if (c.dim % c.heads != 0) return "n_heads " + s(c.heads) + " does not divide dim " + s(c.dim);
  if (c.heads % c.kv_heads != 0) return "n_kv_heads " + s(c.kv_heads) + " does not divide n_heads " + s(c.heads);
  if (c.head_size() % 2 != 0) return "head size dim / n_heads = " + s(c.head_size()) + " is odd (rotary pairs need it even)";
  // 2^20 wide and 2^12 deep: far beyond the small models rcsim studies, small enough to allocate.
  if (c.dim > (1 << 16) || c.hidden > (1 << 18) || c.layers > 4096 || c.vocab > (1 << 20) || c.seq_len > (1 << 20))
    return "sizes beyond what rcsim reads (dim <= 65536, hidden_dim <= 262144, n_layers <= 4096, vocab_size <= 2^20, "
           "seq_len <= 2^20)";
  return "";
}

LlamaModelT<float> to_float(const LlamaModel& m) {
  LlamaModelT<float> f;
  f.config = m.config;
  f.embedding = m.embedding.cast<float>();
  for (const auto& b : m.blocks)
    f.blocks.push_back({b.attn_norm.cast<float>(), b.wq.cast<float>(), b.wk.cast<float>(), b.wv.cast<float>(),
                        b.wo.cast<float>(), b.mlp_norm.cast<float>(), b.w1.cast<float>(), b.w2.cast<float>(),
                        b.w3.cast<float>()});
  f.final_norm = m.final_norm.cast<float>();
  f.classifier = m.classifier.cast<float>();
  return f;
}

LlamaModel random_model(const LlamaConfig& c, unsigned long long seed) {
  RandomStream rng(seed, 0, kWeightsStream);
  const auto gaussian = [&](int rows, int cols) {
    Matrix w(rows, cols);
    rng.fill_normal(w, 1.0 / std::sqrt(static_cast<double>(cols)));
    return w;
  };
  LlamaModel m;
  m.config = c;
  m.config.shared_classifier = true;
  m.embedding = Matrix(c.vocab, c.dim);
  rng.fill_normal(m.embedding, 1.0);
  for (int l = 0; l < c.layers; ++l)
    m.blocks.push_back({Vector::Ones(c.dim), gaussian(c.dim, c.dim), gaussian(c.kv_dim(), c.dim),
                        gaussian(c.kv_dim(), c.dim), gaussian(c.dim, c.dim), Vector::Ones(c.dim),
                        gaussian(c.hidden, c.dim), gaussian(c.dim, c.hidden), gaussian(c.hidden, c.dim)});
  m.final_norm = Vector::Ones(c.dim);
  m.classifier = m.embedding;
  return m;
}

LlamaModel random_blocks(const LlamaModel& m, unsigned long long seed) {
  LlamaModel r = random_model(m.config, seed);
  r.config = m.config;
  r.embedding = m.embedding;
  r.classifier = m.classifier;
  return r;
}

}  // namespace rcsim::llama
