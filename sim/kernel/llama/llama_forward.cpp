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
MatrixT<T> forward_embedded(const LlamaModelT<T>& m, const MatrixT<T>& X, const ForwardOptions& o,
                            std::vector<MatrixT<T>>* states) {
  check_context(m.config, 0, X.rows());
  return BlockStack<T>(m, static_cast<int>(X.rows()), o).forward(X, states);
}

template <class T>
MatrixT<T> forward_tokens(const LlamaModelT<T>& m, const std::vector<int>& ids, const ForwardOptions& o,
                          std::vector<MatrixT<T>>* states) {
  check_context(m.config, 0, static_cast<Eigen::Index>(ids.size()));  // the context first, then the ids
  return forward_embedded<T>(m, embed(m, ids), o, states);
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
    return logits_of(f, forward_tokens(f, ids, o), o).cast<double>();
  }
  return logits_of(m, forward_tokens(m, ids, o), o);
}

std::vector<Matrix> sequence_states(const LlamaModel& m, const std::vector<int>& ids, bool single,
                                    const ForwardOptions& o) {
  std::vector<Matrix> out;
  if (single) {
    const LlamaModelT<float> f = to_float(m);
    std::vector<MatrixF> states;
    forward_tokens(f, ids, o, &states);
    for (const auto& s : states) out.push_back(s.cast<double>());
    return out;
  }
  forward_tokens(m, ids, o, &out);
  return out;
}

template MatrixT<double> embed(const LlamaModelT<double>&, const std::vector<int>&, int);
template MatrixT<float> embed(const LlamaModelT<float>&, const std::vector<int>&, int);
template MatrixT<double> forward_embedded(const LlamaModelT<double>&, const MatrixT<double>&, const ForwardOptions&,
                                          std::vector<MatrixT<double>>*);
template MatrixT<float> forward_embedded(const LlamaModelT<float>&, const MatrixT<float>&, const ForwardOptions&,
                                         std::vector<MatrixT<float>>*);
template MatrixT<double> forward_tokens(const LlamaModelT<double>&, const std::vector<int>&, const ForwardOptions&,
                                        std::vector<MatrixT<double>>*);
template MatrixT<float> forward_tokens(const LlamaModelT<float>&, const std::vector<int>&, const ForwardOptions&,
                                       std::vector<MatrixT<float>>*);
template MatrixT<double> final_normed(const LlamaModelT<double>&, const MatrixT<double>&, const ForwardOptions&);
template MatrixT<float> final_normed(const LlamaModelT<float>&, const MatrixT<float>&, const ForwardOptions&);
template MatrixT<double> logits_of(const LlamaModelT<double>&, const MatrixT<double>&, const ForwardOptions&);
template MatrixT<float> logits_of(const LlamaModelT<float>&, const MatrixT<float>&, const ForwardOptions&);

}  // namespace rcsim::llama
