// Decoding one token at a time (generation), with a key/value cache: per block and head the keys
// (rotated at their positions) and values of every position fed so far, so that a new token costs
// O(T d) per head instead of a whole-sequence forward. The step is the Llama block of
// kernel/llama/llama_block.hpp on one row, composed of the main kernel's operations on the main
// block's weights (block_weights): normalize_rows, apply_rotary, masked_softmax, mlp_forward with
// the gated MLP. tests/llama/test_llama_ops.cpp holds it against the whole-sequence forward
// (transformer_block) at every position.
#pragma once

#include <vector>

#include "kernel/llama/llama_block.hpp"
#include "kernel/ops/mlp.hpp"

namespace rcsim::llama {

template <class T>
class Decoder {
 public:
  Decoder(const LlamaModelT<T>& m, const ForwardOptions& o);
  // Feeds `id` at the next position; returns its logits [1, V] (in double). UsageError for an id
  // outside 0 .. V-1 or a position beyond seq_len.
  RowVector feed(int id);
  int length() const { return length_; }

 private:
  MatrixT<T> block_step(int t, const MatrixT<T>& x);
  const LlamaModelT<T>& m_;
  ForwardOptions o_;
  std::vector<LayerWeightsT<T>> weights_;
  std::vector<std::vector<MatrixT<T>>> keys_, values_;  // [block][head]: [positions so far, s]
  MlpWorkspaceT<T> mlp_;
  int length_ = 0, depth_ = 0;
};

}  // namespace rcsim::llama
