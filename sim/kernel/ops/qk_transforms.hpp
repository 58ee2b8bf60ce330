// The per-head transforms of queries and keys before the logits, Q -> f(Q), K -> g(K) for one head
// ([N, d_k], row i: the token at position i), each with its three passes in its own file:
//   forward  Q, K in place (with a cache, it keeps what its derivatives linearise at);
//   adjoint  the cotangents dQ, dK of its output to those of its input, in place;
//   tangent  the tangents dQ, dK of its input to those of its output, in place.
// The list below is the one place a transform is registered, in the order the forward applies
// them; the head's forward (kernel/block/layer.cpp, general_logits) runs it forward, its adjoint
// and tangent (kernel/ops/attention_head.cpp) run it backward and forward, so those call sites do
// not change for a new transform (docs/dev/kernel.md, "The cost of a new attention variant").
// After any transform the forward forms the logits again, S = Q K^T / sqrt(d_QK) (sqrt(d_k) Q K^T
// with QK-normalisation). A transform that linearises at its input keeps it in HeadCacheT.
#pragma once

#include <cstddef>
#include <iterator>

#include "kernel/model/model_spec.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/ops/qk_norm.hpp"
#include "kernel/ops/rope.hpp"
#include "kernel/ops/xpos.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

template <class T>
struct QkTransform {
  bool (*active)(const AttentionSettings&);
  void (*forward)(const AttentionSettings&, std::size_t head, MatrixT<T>& Q, MatrixT<T>& K, HeadCacheT<T>* c);
  void (*adjoint)(const AttentionSettings&, std::size_t head, const HeadCacheT<T>& c, MatrixT<T>& dQ, MatrixT<T>& dK);
  void (*tangent)(const AttentionSettings&, std::size_t head, const HeadCacheT<T>& c, MatrixT<T>& dQ, MatrixT<T>& dK);
};

// A transform's entry: a struct with static active, forward<T>, adjoint<T>, tangent<T>.
template <class T, class Op>
constexpr QkTransform<T> qk_transform() {
  return {&Op::active, &Op::template forward<T>, &Op::template adjoint<T>, &Op::template tangent<T>};
}

// The list, in the forward's order.
template <class T>
inline constexpr QkTransform<T> kQkTransforms[] = {
    qk_transform<T, QkNormalisation>(),  // attention.qk_norm (ops/qk_norm.hpp)
    qk_transform<T, RotaryEmbedding>(),  // attention.rope (ops/rope.hpp)
    qk_transform<T, XposDecay>(),        // attention.xpos (ops/xpos.hpp)
};

// The active transforms applied in order; whether any was (the logits are then formed again).
template <class T>
bool qk_transforms_forward(const AttentionSettings& a, std::size_t head, MatrixT<T>& Q, MatrixT<T>& K,
                           HeadCacheT<T>* c) {
  bool any = false;
  for (const QkTransform<T>& t : kQkTransforms<T>)
    if (t.active(a)) t.forward(a, head, Q, K, c), any = true;
  return any;
}

// The cotangents of the transformed Q, K to those of the projections: the adjoints in reverse order.
template <class T>
void qk_transforms_adjoint(const AttentionSettings& a, std::size_t head, const HeadCacheT<T>& c, MatrixT<T>& dQ,
                           MatrixT<T>& dK) {
  for (auto t = std::rbegin(kQkTransforms<T>); t != std::rend(kQkTransforms<T>); ++t)
    if (t->active(a)) t->adjoint(a, head, c, dQ, dK);
}

// The tangents of the projections to those of the transformed Q, K: the tangents in order.
template <class T>
void qk_transforms_tangent(const AttentionSettings& a, std::size_t head, const HeadCacheT<T>& c, MatrixT<T>& dQ,
                           MatrixT<T>& dK) {
  for (const QkTransform<T>& t : kQkTransforms<T>)
    if (t.active(a)) t.tangent(a, head, c, dQ, dK);
}

}  // namespace rcsim
