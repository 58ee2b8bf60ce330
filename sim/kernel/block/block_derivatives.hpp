// One transformer block (kernel/block/block.hpp: transformer_block) for the derivative passes: the
// production forward run with a cache, and the block's adjoint and tangent composed from its
// operations' (kernel/ops/: the attention branch, the MLP, the sub-blocks at their placement, the
// tangent projection, the RK4 step) at that cache. block_backward (kernel/block/backward.hpp) and
// block_jvp (kernel/block/forward_mode.hpp) add the noise step and the precision.
#pragma once

#include "kernel/block/block.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/model/grads.hpp"
#include "kernel/model/random.hpp"

namespace rcsim {

// transformer_block(X) with a cache; the dropout masks drawn from `dropout` (a copy of the
// dropout stream as the forward entered the block; it advances), required when p has dropout.
template <class T>
MatrixT<T> block_forward_cached(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p,
                                RandomStream* dropout, BlockCacheT<T>& c);
// Adjoint of the block at c: dOut the gradient of its output; returns dX, adds into g (sized).
template <class T>
MatrixT<T> block_adjoint(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p,
                         const BlockCacheT<T>& c, const MatrixT<T>& dOut, BlockGradsT<T>& g);
// Tangent of the block at c along dX.
template <class T>
MatrixT<T> block_tangent(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p,
                         const BlockCacheT<T>& c, const MatrixT<T>& dX);

}  // namespace rcsim
