// Grouped-query attention (model.kv_heads = H_kv; docs/science/model-spec.md, section 3): H query
// heads share H_kv key/value heads, query head h reading key/value head h / g with g = H / H_kv
// query heads per group (the Llama convention; kernel/llama/llama_block.hpp maps a checkpoint onto it).
//
// A layer's weights keep one W_K, W_V (b_K, b_V) per query head; the g heads of a group hold
// copies of their key/value head's (share_kv_heads), so the forward on every path (general, fast,
// fused, opencl) and the tangent pass compute exactly as for H heads with tied matrices. The
// reverse pass computes the gradient of each copy and sums the copies of a group into the gradient
// of the shared matrix (fold_kv_grads): dL/dW_K,j = sum over h with h / g = j of dL/dW_K(copy h),
// and likewise W_V, b_K, b_V. BlockGrads then hold H_kv entries for them (the weight file's shape).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "kernel/model/weights.hpp"
#include "kernel/model/grads.hpp"

namespace rcsim {

// The key/value head that query head h reads, with g query heads per key/value head.
inline int kv_head_of(int h, int group) { return h / group; }

// Copies the W_K, W_V (and b_K, b_V where present) of the first query head of each group into the
// other heads of the group, and records the grouping (w.kv_group = group). group = 1: nothing.
template <class T>
void share_kv_heads(LayerWeightsT<T>& w, int group) {
  w.kv_group = group;
  if (group <= 1) return;
  const auto share = [group](auto& per_head) {
    for (std::size_t h = 0; h < per_head.size(); ++h) {
      const std::size_t first = static_cast<std::size_t>(kv_head_of(static_cast<int>(h), group) * group);
      if (h != first) per_head[h] = per_head[first];
    }
  };
  share(w.k);
  share(w.v);
  share(w.k_bias);
  share(w.v_bias);
}

// Sums the per-query-head gradients of W_K, W_V, b_K, b_V over each group of `group` heads: from H
// entries (one per copy) to H / group (one per shared matrix). group = 1: nothing.
template <class T>
void fold_kv_grads(BlockGradsT<T>& g, int group) {
  if (group <= 1) return;
  const auto fold = [group](auto& per_head) {
    if (per_head.empty()) return;
    auto shared = per_head;
    shared.resize(per_head.size() / static_cast<std::size_t>(group));
    for (std::size_t j = 0; j < shared.size(); ++j) {
      shared[j] = per_head[j * static_cast<std::size_t>(group)];
      for (std::size_t r = 1; r < static_cast<std::size_t>(group); ++r)
        shared[j] += per_head[j * static_cast<std::size_t>(group) + r];
    }
    per_head = std::move(shared);
  };
  fold(g.dk);
  fold(g.dv);
  fold(g.dk_bias);
  fold(g.dv_bias);
}

}  // namespace rcsim
