// The Llama forward: token ids -> X(0) = embedding rows -> X(1) .. X(L) (the residual stream after
// each block) -> final RMSNorm -> logits = x W_cls^T. Block t:
//   H = RMSNorm(X; g_attn),  Q = rope(H Wq^T), K = rope(H Wk^T), V = H Wv^T,
//   X <- X + GQA(Q, K, V) Wo^T,  X <- X + SwiGLU(RMSNorm(X; g_mlp))
// (kernel/llama/rms_norm.hpp, rotary.hpp, gqa_attention.hpp, swiglu.hpp). Incremental: a key/value
// cache holds every earlier position's rotated keys and values per block, so that generation
// feeds one token at a time and a whole sequence is the same code with an empty cache.
#pragma once

#include <vector>

#include "kernel/llama/llama_cache.hpp"
#include "kernel/llama/llama_model.hpp"

namespace rcsim::llama {

struct ForwardOptions {
  bool norm = true;  // false: every RMSNorm (the blocks' and the final one) is the identity
  int depth = 0;     // blocks applied; 0: L. Beyond L the blocks repeat cyclically (block t mod L),
                     // a probe of the pretrained weights at depth, not the trained model
};

template <class T>
struct KvCacheT {
  std::vector<MatrixT<T>> keys, values;  // per applied block: [positions so far, kv_dim]
  int length = 0;                        // positions so far
};

// X(0) of `ids` at positions first_position, ...: their embedding rows [n, d]. UsageError for an
// id outside 0 .. V-1.
template <class T>
MatrixT<T> embed(const LlamaModelT<T>& m, const std::vector<int>& ids, int first_position = 0);

// The blocks on X(0) = X [n, d] at positions cache.length, ...: returns X(depth) as forward_tokens;
// with `caches`, each applied block's activations are kept there (depth entries, for the
// derivative passes of kernel/llama/llama_backward.hpp).
template <class T>
MatrixT<T> forward_embedded(const LlamaModelT<T>& m, MatrixT<T> X, KvCacheT<T>& cache, const ForwardOptions& o,
                            std::vector<MatrixT<T>>* states = nullptr,
                            std::vector<LlamaBlockCacheT<T>>* caches = nullptr);

// Feed `ids` at positions cache.length, ...: returns X(depth) of the new tokens [n, d] and, when
// `states` is given, appends X(0) .. X(depth) of the new tokens to it (depth + 1 matrices).
// UsageError for an id outside 0 .. V-1 or a position beyond the model's seq_len.
template <class T>
MatrixT<T> forward_tokens(const LlamaModelT<T>& m, const std::vector<int>& ids, KvCacheT<T>& cache,
                          const ForwardOptions& o, std::vector<MatrixT<T>>* states = nullptr);

// The final RMSNorm of the rows of X(depth) (the identity with norm off); with `rstd`, its row
// scales are kept there (for the cross-entropy's adjoint).
template <class T>
MatrixT<T> final_normed(const LlamaModelT<T>& m, const MatrixT<T>& X, const ForwardOptions& o,
                        VectorT<T>* rstd = nullptr);
// The logits [n, V] of the rows of X(depth): final_normed(X) W_cls^T.
template <class T>
MatrixT<T> logits_of(const LlamaModelT<T>& m, const MatrixT<T>& X, const ForwardOptions& o);

// The whole sequence at once: its logits [T, V] (row t predicts the token after ids[t]) in float64
// or, with `single`, computed in float32 throughout (weights rounded to float) and returned in double.
Matrix sequence_logits(const LlamaModel& m, const std::vector<int>& ids, bool single, const ForwardOptions& o = {});
// X(0) .. X(depth) of the whole sequence [T, d] each, in float64 or float32 (returned in double).
std::vector<Matrix> sequence_states(const LlamaModel& m, const std::vector<int>& ids, bool single,
                                    const ForwardOptions& o = {});

}  // namespace rcsim::llama
