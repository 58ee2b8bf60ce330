// The attention branch of a layer, Y = D_out .* (c sum_h A_h V_h + 1 b_O^T) (kernel/block/layer.hpp:
// attention_layer; c = 1/H for head_mix = mean), each head A_h = weights(S_h), S_h the logits
// (X W_Q + b_Q)(X W_K + b_K)^T / sqrt(d_QK) (QK-normalised: sqrt(d_k) Q_n K_n^T; plus a constant
// logit bias; random-Markov: G_h, independent of X), shaped (a A + b I - c C) and dropped out
// (D .* A_s), V_h = (X W_V + b_V) W_O. Its adjoint and tangent at the forward's cache (LayerCacheT:
// attention_layer's general path), docs/science/gradients.md, the attention table.
#pragma once

#include "kernel/model/block_settings.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/ops/attention.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/model/grads.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// Adjoint: dY = dL/dY; adds into g.dq, dk, dv, dout and the bias gradients (sized by the caller);
// returns dX. Hardmax and random-Markov weights pass nothing to W_Q, W_K (their A does not vary
// with the logits, or does not depend on X).
template <class T>
MatrixT<T> attention_branch_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                                     const LayerCacheT<T>& c, const MatrixT<T>& dY, BlockGradsT<T>& g);
// Tangent along dX: dY = D_out .* (c sum_h (dA_h V_h + A_h dV_h)).
template <class T>
MatrixT<T> attention_branch_jvp(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                                const LayerCacheT<T>& c, const MatrixT<T>& dX);
}  // namespace rcsim
