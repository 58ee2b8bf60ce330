#include "kernel/llama/llama_forward.hpp"

#include <string>

#include "kernel/support/errors.hpp"
#include "kernel/llama/gqa_attention.hpp"
#include "kernel/llama/rms_norm.hpp"
#include "kernel/llama/rotary.hpp"
#include "kernel/llama/swiglu.hpp"

namespace rcsim::llama {

namespace {

template <class T>
MatrixT<T> normed(const MatrixT<T>& X, const VectorT<T>& gain, const LlamaConfig& c, const ForwardOptions& o,
                  VectorT<T>* rstd = nullptr) {
  return o.norm ? rms_norm(X, gain, c.norm_eps, rstd) : X;
}

template <class T>
void append_rows(MatrixT<T>& cache, const MatrixT<T>& rows) {
  const Eigen::Index old = cache.rows();
  cache.conservativeResize(old + rows.rows(), rows.cols());
  cache.bottomRows(rows.rows()) = rows;
}

void check_context(const LlamaConfig& c, int length, Eigen::Index n) {
  if (length + n > c.seq_len)
    throw UsageError("a sequence of " + std::to_string(length + n) + " tokens is longer than the model's context (seq_len " +
                     std::to_string(c.seq_len) + ")");
}

// One block on the new tokens X [n, d] at positions p0 .. p0 + n - 1; with bc, its activations
// are kept there (kernel/llama/llama_cache.hpp).
template <class T>
void block_forward(const LlamaBlockT<T>& b, const LlamaConfig& c, const ForwardOptions& o, int p0, MatrixT<T>& X,
                   MatrixT<T>& keys, MatrixT<T>& values, LlamaBlockCacheT<T>* bc) {
  if (bc) bc->first_position = p0, bc->X = X;
  const MatrixT<T> H = normed(X, b.attn_norm, c, o, bc ? &bc->rstd_attn : nullptr);
  MatrixT<T> Q = H * b.wq.transpose();
  MatrixT<T> K = H * b.wk.transpose();
  apply_rotary(Q, c.head_size(), p0, c.rope_theta);
  apply_rotary(K, c.head_size(), p0, c.rope_theta);
  append_rows(keys, K);
  append_rows(values, MatrixT<T>(H * b.wv.transpose()));
  const MatrixT<T> att = gqa_attention(Q, keys, values, c.heads, c.kv_heads, p0, bc ? &bc->A : nullptr);
  X += att * b.wo.transpose();
  const MatrixT<T> H2 = normed(X, b.mlp_norm, c, o, bc ? &bc->rstd_mlp : nullptr);
  if (bc) bc->H = H, bc->Q = Q, bc->K = keys, bc->V = values, bc->att = att, bc->X_mid = X, bc->H2 = H2;
  X += swiglu(H2, b.w1, b.w2, b.w3, bc ? &bc->mlp : nullptr);
}

}  // namespace

template <class T>
MatrixT<T> embed(const LlamaModelT<T>& m, const std::vector<int>& ids, int first_position) {
  const LlamaConfig& c = m.config;
  MatrixT<T> X(static_cast<Eigen::Index>(ids.size()), c.dim);
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    const int id = ids[static_cast<std::size_t>(i)];
    if (id < 0 || id >= c.vocab)
      throw UsageError("token id " + std::to_string(id) + " at position " + std::to_string(first_position + i) +
                       " is outside the vocabulary 0 .. " + std::to_string(c.vocab - 1));
    X.row(i) = m.embedding.row(id);
  }
  return X;
}

template <class T>
MatrixT<T> forward_embedded(const LlamaModelT<T>& m, MatrixT<T> X, KvCacheT<T>& cache, const ForwardOptions& o,
                            std::vector<MatrixT<T>>* states, std::vector<LlamaBlockCacheT<T>>* caches) {
  const LlamaConfig& c = m.config;
  const int depth = o.depth > 0 ? o.depth : c.layers;
  const auto n = X.rows();
  check_context(c, cache.length, n);
  if (cache.keys.empty()) {
    cache.keys.assign(static_cast<std::size_t>(depth), MatrixT<T>(0, c.kv_dim()));
    cache.values = cache.keys;
  }
  if (states) states->push_back(X);
  if (caches) caches->assign(static_cast<std::size_t>(depth), {});
  for (int t = 0; t < depth; ++t) {
    const auto slot = static_cast<std::size_t>(t);
    block_forward(m.blocks[static_cast<std::size_t>(t % c.layers)], c, o, cache.length, X, cache.keys[slot],
                  cache.values[slot], caches ? &(*caches)[slot] : nullptr);
    if (states) states->push_back(X);
  }
  cache.length += static_cast<int>(n);
  return X;
}

template <class T>
MatrixT<T> forward_tokens(const LlamaModelT<T>& m, const std::vector<int>& ids, KvCacheT<T>& cache,
                          const ForwardOptions& o, std::vector<MatrixT<T>>* states) {
  check_context(m.config, cache.length, static_cast<Eigen::Index>(ids.size()));  // the context first, then the ids
  return forward_embedded<T>(m, embed(m, ids, cache.length), cache, o, states, nullptr);
}

template <class T>
MatrixT<T> final_normed(const LlamaModelT<T>& m, const MatrixT<T>& X, const ForwardOptions& o, VectorT<T>* rstd) {
  return normed(X, m.final_norm, m.config, o, rstd);
}

template <class T>
MatrixT<T> logits_of(const LlamaModelT<T>& m, const MatrixT<T>& X, const ForwardOptions& o) {
  return final_normed(m, X, o) * m.classifier.transpose();
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

template MatrixT<double> embed(const LlamaModelT<double>&, const std::vector<int>&, int);
template MatrixT<float> embed(const LlamaModelT<float>&, const std::vector<int>&, int);
template MatrixT<double> forward_embedded(const LlamaModelT<double>&, MatrixT<double>, KvCacheT<double>&,
                                          const ForwardOptions&, std::vector<MatrixT<double>>*,
                                          std::vector<LlamaBlockCacheT<double>>*);
template MatrixT<float> forward_embedded(const LlamaModelT<float>&, MatrixT<float>, KvCacheT<float>&,
                                         const ForwardOptions&, std::vector<MatrixT<float>>*,
                                         std::vector<LlamaBlockCacheT<float>>*);
template MatrixT<double> forward_tokens(const LlamaModelT<double>&, const std::vector<int>&, KvCacheT<double>&,
                                        const ForwardOptions&, std::vector<MatrixT<double>>*);
template MatrixT<float> forward_tokens(const LlamaModelT<float>&, const std::vector<int>&, KvCacheT<float>&,
                                       const ForwardOptions&, std::vector<MatrixT<float>>*);
template MatrixT<double> final_normed(const LlamaModelT<double>&, const MatrixT<double>&, const ForwardOptions&,
                                      VectorT<double>*);
template MatrixT<float> final_normed(const LlamaModelT<float>&, const MatrixT<float>&, const ForwardOptions&,
                                     VectorT<float>*);
template MatrixT<double> logits_of(const LlamaModelT<double>&, const MatrixT<double>&, const ForwardOptions&);
template MatrixT<float> logits_of(const LlamaModelT<float>&, const MatrixT<float>&, const ForwardOptions&);

}  // namespace rcsim::llama
