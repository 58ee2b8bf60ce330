// The Llama forward: token ids -> X(0) = embedding rows -> X(1) .. X(L) (the residual stream after
// each block) -> final RMSNorm -> logits = x W_cls^T. Block t:
//   H = RMSNorm(X; g_attn),  Q = rope(H Wq^T), K = rope(H Wk^T), V = H Wv^T,
//   X <- X + GQA(Q, K, V) Wo^T,  X <- X + SwiGLU(RMSNorm(X; g_mlp)),
// computed by the main block (transformer_block) with the settings of kernel/llama/llama_block.hpp,
// on whole sequences (positions 0 ..). Decoding one token at a time with a key/value cache is
// kernel/llama/generation.hpp's.
#pragma once

#include <vector>

#include "kernel/llama/llama_block.hpp"
#include "kernel/llama/llama_model.hpp"

namespace rcsim::llama {

// X(0) of `ids` at positions first_position, ...: their embedding rows [n, d]. UsageError for an
// id outside 0 .. V-1.
template <class T>
MatrixT<T> embed(const LlamaModelT<T>& m, const std::vector<int>& ids, int first_position = 0);

// X(depth) of the sequence whose X(0) is X [T, d] (positions 0 .. T-1); with `states`, X(0) ..
// X(depth) are appended there (depth + 1 matrices).
template <class T>
MatrixT<T> forward_embedded(const LlamaModelT<T>& m, const MatrixT<T>& X, const ForwardOptions& o,
                            std::vector<MatrixT<T>>* states = nullptr);
// The same from the token ids. UsageError for an id outside 0 .. V-1 or a sequence longer than the
// model's seq_len.
template <class T>
MatrixT<T> forward_tokens(const LlamaModelT<T>& m, const std::vector<int>& ids, const ForwardOptions& o,
                          std::vector<MatrixT<T>>* states = nullptr);

// The final RMSNorm of the rows of X(depth) (the identity with norm off).
template <class T>
MatrixT<T> final_normed(const LlamaModelT<T>& m, const MatrixT<T>& X, const ForwardOptions& o);
// The model's final RMSNorm as the main kernel's Normalization (type none with norm off).
Normalization final_norm(const LlamaConfig& c, const VectorT<double>& gain, const ForwardOptions& o);
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
