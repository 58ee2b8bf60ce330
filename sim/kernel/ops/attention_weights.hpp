// The attention map: the weights A of one head from its masked logits S, row by row over the
// entries the mask allows (masked entries exactly 0), with its adjoint and tangent, for every
// attention.kind. The one place that dispatches on the kind: the head's forward
// (kernel/block/layer.cpp) and its derivatives (kernel/ops/attention_head.cpp) call these, so a new
// map is a new case here (and its name in kernel/model/model_spec.hpp, sim/config/names.cpp).
//   softmax        A_ij = exp(S_ij) / sum_k exp(S_ik)           (kernel/ops/softmax.hpp)
//   usa            A_ij = exp(S_ij - usa_shift) / N             (kernel/ops/softmax.hpp)
//   hardmax        A_ij = 1/|S_i| on the row's maximisers       derivative 0 (piecewise constant)
//   random_markov  A = softmax(G), G the head's fixed logits    derivative that of the softmax
//   softpick       A_ij = ReLU(e^S_ij - 1) / (sum_k |e^S_ik - 1| + eps)   (Zuhri et al. 2025; its
//                  derivatives need S: attention_weights.cpp)
// The head skips the logits' derivatives for hardmax and random_markov (their logits do not vary with
// X), so their cases of the derivatives are for completeness.
#pragma once

#include "kernel/model/model_spec.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// S (n x m) replaced by the weights in place. usa_shift: usa's c (attention.usa_normalised), else unused.
template <class T>
void attention_weights(AttentionKind kind, Eigen::Ref<MatrixT<T>> S, const MaskMatrix& mask, double usa_shift = 0.0);

// Whether the map's derivatives need the logits S beside its output A (then the head's cache keeps
// them: HeadCacheT::S); the others take an empty S.
bool attention_weights_need_logits(AttentionKind kind);

// Adjoint dS = (dA/dS)^T dA and tangent dA = (dA/dS) dS at S (A = the map's output); exactly 0 off
// the mask.
template <class T>
MatrixT<T> attention_weights_backward(AttentionKind kind, const MatrixT<T>& A, const MatrixT<T>& S,
                                      const MatrixT<T>& dA, const MaskMatrix& mask);
template <class T>
MatrixT<T> attention_weights_jvp(AttentionKind kind, const MatrixT<T>& A, const MatrixT<T>& S, const MatrixT<T>& dS,
                                 const MaskMatrix& mask);

}  // namespace rcsim
