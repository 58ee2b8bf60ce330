// A Llama-architecture transformer in memory (llama2.c's model: Touvron et al. 2023 at small
// size): token embedding, L pre-norm blocks (RMSNorm -> grouped-query attention with rotary
// position embedding -> residual; RMSNorm -> SwiGLU MLP -> residual), final RMSNorm, classifier.
// Every matrix is stored [out, in] as the checkpoint stores it: a token row x maps to x W^T.
// io/llama_checkpoint.hpp reads one from llama2.c's checkpoint format.
#pragma once

#include <string>
#include <vector>

#include "kernel/support/types.hpp"

namespace rcsim::llama {

// The architecture (the checkpoint header).
struct LlamaConfig {
  int dim = 0;         // d, the width of the residual stream
  int hidden = 0;      // the SwiGLU hidden width m
  int layers = 0;      // L blocks
  int heads = 0;       // H query heads, head size d / H
  int kv_heads = 0;    // H_kv key/value heads; query head h reads key/value head h / (H / H_kv)
  int vocab = 0;       // V token ids 0 .. V-1
  int seq_len = 0;     // the context the model was trained for (longest sequence it accepts)
  bool shared_classifier = true;  // classifier = token embedding
  double norm_eps = 1e-5;         // RMSNorm's epsilon (llama2.c: 1e-5)
  double rope_theta = 10000.0;    // rotary base (llama2.c: 10000)

  int head_size() const { return dim / heads; }
  int kv_dim() const { return kv_heads * head_size(); }
};

// What is wrong with `c` ("" if nothing): positive sizes, heads dividing dim, kv_heads dividing
// heads, an even head size (rotary pairs), sizes small enough to allocate.
std::string config_problem(const LlamaConfig& c);

template <class T>
struct LlamaBlockT {
  VectorT<T> attn_norm;       // d: RMSNorm gain before attention
  MatrixT<T> wq, wk, wv, wo;  // [d, d], [kv_dim, d], [kv_dim, d], [d, d]
  VectorT<T> mlp_norm;        // d: RMSNorm gain before the MLP
  MatrixT<T> w1, w2, w3;      // [m, d], [d, m], [m, d]
};

template <class T>
struct LlamaModelT {
  LlamaConfig config;
  MatrixT<T> embedding;  // [V, d]
  std::vector<LlamaBlockT<T>> blocks;
  VectorT<T> final_norm;  // d
  MatrixT<T> classifier;  // [V, d] (a copy of the embedding when shared)
};
using LlamaModel = LlamaModelT<double>;
using LlamaBlock = LlamaBlockT<double>;

// The same model rounded to float (for float32 runs).
LlamaModelT<float> to_float(const LlamaModel& m);

// A model of `c` with random weights, for the random-weight baseline: every matrix entry
// N(0, 1/fan_in), embedding entries N(0, 1), every gain 1; the classifier the embedding.
// Deterministic in `seed`.
LlamaModel random_model(const LlamaConfig& c, unsigned long long seed);
// `m` with random blocks (as random_model draws them, gains 1, final gain 1) but its own token
// embedding and classifier: the random-weight baseline on the same X(0).
LlamaModel random_blocks(const LlamaModel& m, unsigned long long seed);

}  // namespace rcsim::llama
