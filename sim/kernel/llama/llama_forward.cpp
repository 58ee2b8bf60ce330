#include "kernel/llama/llama_forward.hpp"

#include <string>

#include "kernel/ops/normalization.hpp"
#include "kernel/support/errors.hpp"

namespace rcsim::llama {

namespace {

void check_context(const LlamaConfig& c, int length, Eigen::Index n) {
  if (length + n > c.seq_len)
    throw UsageError("a sequence of " + std::to_string(length + n) + " tokens is longer than the model's context (seq_len " +
                     std::to_string(c.seq_len) + ")");
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
MatrixT<T> forward_embedded(const LlamaModelT<T>& m, const MatrixT<T>& X, PrefixT<T>& prefix, const ForwardOptions& o,
                            std::vector<MatrixT<T>>* states) {
  const auto n = X.rows();
  check_context(m.config, prefix.length, n);
  prefix.X0.conservativeResize(prefix.length + n, X.cols());
  prefix.X0.bottomRows(n) = X;
  prefix.length += static_cast<int>(n);
  const BlockStack<T> stack(m, prefix.length, o);
  std::vector<MatrixT<T>> all;
  const MatrixT<T> out = stack.forward(prefix.X0, states ? &all : nullptr);
  for (const auto& s : all) states->push_back(s.bottomRows(n));
  return out.bottomRows(n);
}

template <class T>
MatrixT<T> forward_tokens(const LlamaModelT<T>& m, const std::vector<int>& ids, PrefixT<T>& prefix,
                          const ForwardOptions& o, std::vector<MatrixT<T>>* states) {
  check_context(m.config, prefix.length, static_cast<Eigen::Index>(ids.size()));  // the context first, then the ids
  return forward_embedded<T>(m, embed(m, ids, prefix.length), prefix, o, states);
}

Normalization final_norm(const LlamaConfig& c, const VectorT<double>& gain, const ForwardOptions& o) {
  Normalization n(o.norm ? NormType::rmsnorm : NormType::none, c.dim, c.norm_eps);
  if (o.norm) n.gain = gain.transpose();
  return n;
}

template <class T>
MatrixT<T> final_normed(const LlamaModelT<T>& m, const MatrixT<T>& X, const ForwardOptions& o) {
  MatrixT<T> Y = X;
  normalize_rows(Y, final_norm(m.config, m.final_norm.template cast<double>(), o));
  return Y;
}

template <class T>
MatrixT<T> logits_of(const LlamaModelT<T>& m, const MatrixT<T>& X, const ForwardOptions& o) {
  return final_normed(m, X, o) * m.classifier.transpose();
}

Matrix sequence_logits(const LlamaModel& m, const std::vector<int>& ids, bool single, const ForwardOptions& o) {
  if (single) {
    const LlamaModelT<float> f = to_float(m);
    PrefixT<float> prefix;
    return logits_of(f, forward_tokens(f, ids, prefix, o), o).cast<double>();
  }
  PrefixT<double> prefix;
  return logits_of(m, forward_tokens(m, ids, prefix, o), o);
}

std::vector<Matrix> sequence_states(const LlamaModel& m, const std::vector<int>& ids, bool single,
                                    const ForwardOptions& o) {
  std::vector<Matrix> out;
  if (single) {
    const LlamaModelT<float> f = to_float(m);
    PrefixT<float> prefix;
    std::vector<MatrixF> states;
    forward_tokens(f, ids, prefix, o, &states);
    for (const auto& s : states) out.push_back(s.cast<double>());
    return out;
  }
  PrefixT<double> prefix;
  forward_tokens(m, ids, prefix, o, &out);
  return out;
}

template MatrixT<double> embed(const LlamaModelT<double>&, const std::vector<int>&, int);
template MatrixT<float> embed(const LlamaModelT<float>&, const std::vector<int>&, int);
template MatrixT<double> forward_embedded(const LlamaModelT<double>&, const MatrixT<double>&, PrefixT<double>&,
                                          const ForwardOptions&, std::vector<MatrixT<double>>*);
template MatrixT<float> forward_embedded(const LlamaModelT<float>&, const MatrixT<float>&, PrefixT<float>&,
                                         const ForwardOptions&, std::vector<MatrixT<float>>*);
template MatrixT<double> forward_tokens(const LlamaModelT<double>&, const std::vector<int>&, PrefixT<double>&,
                                        const ForwardOptions&, std::vector<MatrixT<double>>*);
template MatrixT<float> forward_tokens(const LlamaModelT<float>&, const std::vector<int>&, PrefixT<float>&,
                                       const ForwardOptions&, std::vector<MatrixT<float>>*);
template MatrixT<double> final_normed(const LlamaModelT<double>&, const MatrixT<double>&, const ForwardOptions&);
template MatrixT<float> final_normed(const LlamaModelT<float>&, const MatrixT<float>&, const ForwardOptions&);
template MatrixT<double> logits_of(const LlamaModelT<double>&, const MatrixT<double>&, const ForwardOptions&);
template MatrixT<float> logits_of(const LlamaModelT<float>&, const MatrixT<float>&, const ForwardOptions&);

}  // namespace rcsim::llama
