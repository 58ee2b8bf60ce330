#include "kernel/llama/decoder.hpp"

#include <atomic>
#include <cmath>
#include <string>

#include "kernel/llama/llama_forward.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/ops/rotary.hpp"
#include "kernel/ops/softmax.hpp"
#include "kernel/support/errors.hpp"

namespace rcsim::llama {

namespace {

template <class T>
void append_row(MatrixT<T>& rows, const MatrixT<T>& row) {
  rows.conservativeResize(rows.rows() + 1, row.cols());
  rows.bottomRows(1) = row;
}

}  // namespace

template <class T>
Decoder<T>::Decoder(const LlamaModelT<T>& m, const ForwardOptions& o)
    : m_(m), o_(o), depth_(o.depth > 0 ? o.depth : m.config.layers) {
  for (const auto& b : m.blocks) weights_.push_back(block_weights<T>(b, m.config, o));
  keys_.assign(static_cast<std::size_t>(depth_), std::vector<MatrixT<T>>(static_cast<std::size_t>(m.config.heads)));
  values_ = keys_;
}

// Block t on the new token's row x at position length_: H = N(x), per head q, k (rotated), v;
// softmax(K q / sqrt(s)) over every position so far; x + sum_h a_h V_h W_O,h; + M(N2(x_mid)).
template <class T>
MatrixT<T> Decoder<T>::block_step(int t, const MatrixT<T>& x) {
  const LlamaConfig& c = m_.config;
  const LayerWeightsT<T>& w = weights_[static_cast<std::size_t>(t % c.layers)];
  const int s = c.head_size();
  static const Normalization none;
  MatrixT<T> H = x;
  normalize_rows(H, o_.norm ? w.norms[kNormAttn] : none);
  MatrixT<T> mid = x;
  for (int h = 0; h < c.heads; ++h) {
    const auto hh = static_cast<std::size_t>(h);
    MatrixT<T> q = H * w.q[hh], k = H * w.k[hh];
    apply_rotary<T>(q, s, length_, c.rope_theta);
    apply_rotary<T>(k, s, length_, c.rope_theta);
    auto& K = keys_[static_cast<std::size_t>(t)][hh];
    auto& V = values_[static_cast<std::size_t>(t)][hh];
    append_row<T>(K, k);
    append_row<T>(V, MatrixT<T>(H * w.v[hh]));
    MatrixT<T> a = (q * K.transpose()) / static_cast<T>(std::sqrt(static_cast<double>(s)));
    masked_softmax(a, MaskMatrix::Ones(1, a.cols()));
    mid.noalias() += (a * V) * w.o[hh];
  }
  MatrixT<T> H2 = mid, out;
  normalize_rows(H2, o_.norm ? w.norms[kNormMlp] : none);
  mlp_forward(H2, w, MlpActivation::swiglu, mlp_, out);
  return mid + out;
}

template <class T>
RowVector Decoder<T>::feed(int id) {
  if (length_ + 1 > m_.config.seq_len)
    throw UsageError("a sequence of " + std::to_string(length_ + 1) + " tokens is longer than the model's context (seq_len " +
                     std::to_string(m_.config.seq_len) + ")");
  MatrixT<T> x = embed(m_, {id}, length_);
  for (int t = 0; t < depth_; ++t) {
    if (o_.cancel && o_.cancel->load(std::memory_order_relaxed)) throw Interrupted();
    x = block_step(t, x);
  }
  ++length_;
  return logits_of(m_, x, o_).row(0).template cast<double>();
}

template class Decoder<double>;
template class Decoder<float>;

}  // namespace rcsim::llama
