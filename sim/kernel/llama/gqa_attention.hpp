// Causal grouped-query attention (Ainslie et al. 2023): H query heads share H_kv key/value heads,
// query head h reading key/value head h / (H / H_kv). For head h and query row i (at position
// first_position + i), over the keys j = 0 .. first_position + i:
//   out_h(i) = sum_j softmax_j( q_h(i) . k_g(j) / sqrt(s) ) v_g(j),   g = h / (H / H_kv),
// s the head size. The heads' outputs side by side: [n, H s] (before the output projection).
#pragma once

#include "kernel/types.hpp"

namespace rcsim::llama {

// Q [n, H s] (rotated), K and V [first_position + n, H_kv s] (K rotated): every key and value
// up to the last query's position. Returns [n, H s].
template <class T>
MatrixT<T> gqa_attention(const MatrixT<T>& Q, const MatrixT<T>& K, const MatrixT<T>& V, int heads, int kv_heads,
                         int first_position);

}  // namespace rcsim::llama
