#include "kernel/llama/llama_forward.hpp"

#include <string>

#include "kernel/errors.hpp"
#include "kernel/llama/gqa_attention.hpp"
#include "kernel/llama/rms_norm.hpp"
#include "kernel/llama/rotary.hpp"
#include "kernel/llama/swiglu.hpp"

namespace rcsim::llama {

namespace {

template <class T>
MatrixT<T> normed(const MatrixT<T>& X, const VectorT<T>& gain, const LlamaConfig& c, const ForwardOptions& o) {
  return o.norm ? rms_norm(X, gain, c.norm_eps) : X;
}

template <class T>
void append_rows(MatrixT<T>& cache, const MatrixT<T>& rows) {
  const Eigen::Index old = cache.rows();
  cache.conservativeResize(old + rows.rows(), rows.cols());
  cache.bottomRows(rows.rows()) = rows;
}

// One block on the new tokens X [n, d] at positions p0 .. p0 + n - 1.
template <class T>
void block_forward(const LlamaBlockT<T>& b, const LlamaConfig& c, const ForwardOptions& o, int p0, MatrixT<T>& X,
                   MatrixT<T>& keys, MatrixT<T>& values) {
  const MatrixT<T> H = normed(X, b.attn_norm, c, o);
  MatrixT<T> Q = H * b.wq.transpose();
  MatrixT<T> K = H * b.wk.transpose();
  apply_rotary(Q, c.head_size(), p0, c.rope_theta);
  apply_rotary(K, c.head_size(), p0, c.rope_theta);
  append_rows(keys, K);
  append_rows(values, MatrixT<T>(H * b.wv.transpose()));
  X += gqa_attention(Q, keys, values, c.heads, c.kv_heads, p0) * b.wo.transpose();
  X += swiglu(normed(X, b.mlp_norm, c, o), b.w1, b.w2, b.w3);
}

}  // namespace

template <class T>
MatrixT<T> forward_tokens(const LlamaModelT<T>& m, const std::vector<int>& ids, KvCacheT<T>& cache,
                          const ForwardOptions& o, std::vector<MatrixT<T>>* states) {
  const LlamaConfig& c = m.config;
  const int depth = o.depth > 0 ? o.depth : c.layers;
  const auto n = static_cast<Eigen::Index>(ids.size());
  if (cache.length + n > c.seq_len)
    throw UsageError("a sequence of " + std::to_string(cache.length + n) + " tokens is longer than the model's context (seq_len " +
                     std::to_string(c.seq_len) + ")");
  MatrixT<T> X(n, c.dim);
  for (Eigen::Index i = 0; i < n; ++i) {
    const int id = ids[static_cast<std::size_t>(i)];
    if (id < 0 || id >= c.vocab)
      throw UsageError("token id " + std::to_string(id) + " at position " + std::to_string(cache.length + i) +
                       " is outside the vocabulary 0 .. " + std::to_string(c.vocab - 1));
    X.row(i) = m.embedding.row(id);
  }
  if (cache.keys.empty()) {
    cache.keys.assign(static_cast<std::size_t>(depth), MatrixT<T>(0, c.kv_dim()));
    cache.values = cache.keys;
  }
  if (states) states->push_back(X);
  for (int t = 0; t < depth; ++t) {
    const auto slot = static_cast<std::size_t>(t);
    block_forward(m.blocks[static_cast<std::size_t>(t % c.layers)], c, o, cache.length, X, cache.keys[slot],
                  cache.values[slot]);
    if (states) states->push_back(X);
  }
  cache.length += static_cast<int>(n);
  return X;
}

template <class T>
MatrixT<T> logits_of(const LlamaModelT<T>& m, const MatrixT<T>& X, const ForwardOptions& o) {
  return normed(X, m.final_norm, m.config, o) * m.classifier.transpose();
}

Matrix sequence_logits(const LlamaModel& m, const std::vector<int>& ids, bool single, const ForwardOptions& o) {
  if (single) {
    const LlamaModelT<float> f = to_float(m);
    KvCacheT<float> cache;
    return logits_of(f, forward_tokens(f, ids, cache, o), o).cast<double>();
  }
  KvCacheT<double> cache;
  return logits_of(m, forward_tokens(m, ids, cache, o), o);
}

std::vector<Matrix> sequence_states(const LlamaModel& m, const std::vector<int>& ids, bool single,
                                    const ForwardOptions& o) {
  std::vector<Matrix> out;
  if (single) {
    const LlamaModelT<float> f = to_float(m);
    KvCacheT<float> cache;
    std::vector<MatrixF> states;
    forward_tokens(f, ids, cache, o, &states);
    for (const auto& s : states) out.push_back(s.cast<double>());
    return out;
  }
  KvCacheT<double> cache;
  forward_tokens(m, ids, cache, o, &out);
  return out;
}

template MatrixT<double> forward_tokens(const LlamaModelT<double>&, const std::vector<int>&, KvCacheT<double>&,
                                        const ForwardOptions&, std::vector<MatrixT<double>>*);
template MatrixT<float> forward_tokens(const LlamaModelT<float>&, const std::vector<int>&, KvCacheT<float>&,
                                       const ForwardOptions&, std::vector<MatrixT<float>>*);
template MatrixT<double> logits_of(const LlamaModelT<double>&, const MatrixT<double>&, const ForwardOptions&);
template MatrixT<float> logits_of(const LlamaModelT<float>&, const MatrixT<float>&, const ForwardOptions&);

}  // namespace rcsim::llama
