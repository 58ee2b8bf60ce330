// Causal grouped-query attention (Ainslie et al. 2023): H query heads share H_kv key/value heads,
// query head h reading key/value head h / (H / H_kv). For head h and query row i (at position
// first_position + i), over the keys j = 0 .. first_position + i:
//   out_h(i) = sum_j softmax_j( q_h(i) . k_g(j) / sqrt(s) ) v_g(j),   g = h / (H / H_kv),
// s the head size. The heads' outputs side by side: [n, H s] (before the output projection).
// The forward, and its adjoint and tangent at the attention weights A_h the forward kept.
#pragma once

#include <vector>

#include "kernel/support/types.hpp"

namespace rcsim::llama {

// Q [n, H s] (rotated), K and V [first_position + n, H_kv s] (K rotated): every key and value
// up to the last query's position. Returns [n, H s]. With `weights`, the attention weights
// A_h [n, first_position + n] of every head (zero beyond each row's position) are kept there.
template <class T>
MatrixT<T> gqa_attention(const MatrixT<T>& Q, const MatrixT<T>& K, const MatrixT<T>& V, int heads, int kv_heads,
                         int first_position, std::vector<MatrixT<T>>* weights = nullptr);

// The gradients of Q, K and V.
template <class T>
struct GqaGradsT {
  MatrixT<T> dQ, dK, dV;
};

// Adjoint at the forward's A_h: dOut [n, H s] the gradient of the output. Per head h (group g,
// scale c = 1/sqrt(s)): dV_g += A_h^T dO_h, dA = dO_h V_g^T, dS = A_h .* (dA - rowsum(A_h .* dA)),
// dQ_h = c dS K_g, dK_g += c dS^T Q_h. The causal mask needs nothing: masked weights are 0.
template <class T>
GqaGradsT<T> gqa_attention_backward(const MatrixT<T>& Q, const MatrixT<T>& K, const MatrixT<T>& V, int heads,
                                    int kv_heads, const std::vector<MatrixT<T>>& weights, const MatrixT<T>& dOut);
// Tangent along (dQ, dK, dV): dS = c (dQ_h K_g^T + Q_h dK_g^T), dA = A_h .* (dS - rowsum(A_h .* dS)),
// dO_h = dA V_g + A_h dV_g.
template <class T>
MatrixT<T> gqa_attention_tangent(const MatrixT<T>& Q, const MatrixT<T>& K, const MatrixT<T>& V, int heads,
                                 int kv_heads, const std::vector<MatrixT<T>>& weights, const MatrixT<T>& dQ,
                                 const MatrixT<T>& dK, const MatrixT<T>& dV);

}  // namespace rcsim::llama
