// A sub-block of transformer_block (kernel/block/block.hpp) around a branch F (the attention or the
// MLP) at its placement, with the normalisations N (slot `main`) and N_out (slot `out`), the
// branch weight a, the skip gain s and the pre-LN scaling c:
//   post: N(s X + a F(X))            (a = 0: N(F(X)))
//   pre:  s X + a F(c N(X))          (a = 0: F(c N(X)))
//   peri: s X + a N_out(F(c N(X)))   (a = 0: N_out(F(c N(X))))
//   ngpt: N((1 - a) X + a N_out(F(X)))   (s ignored)
// Adjoint and tangent at the forward's cache (SubBlockCacheT), given the branch's own.
#pragma once

#include <functional>

#include "kernel/model/block_settings.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/model/grads.hpp"

namespace rcsim {

template <class T>
struct SubBlockSpec {
  NormPosition pos;
  T a, s, c;
  const Normalization &n, &n_out;
  int main, out;  // the NormSlots of n and n_out (their gradients in BlockGradsT)
};
// The attention sub-block's and the MLP sub-block's of block parameters p with weights w.
template <class T>
SubBlockSpec<T> attention_sub_block(const LayerWeightsT<T>& w, const BlockParams& p);
template <class T>
SubBlockSpec<T> mlp_sub_block(const LayerWeightsT<T>& w, const BlockParams& p);

// The branch's adjoint (input, dF) -> d input and tangent (input, d input) -> dF.
template <class T>
using BranchMap = std::function<MatrixT<T>(const MatrixT<T>&, const MatrixT<T>&)>;

// Adjoint: X the sub-block's input, dOut the gradient of its output; returns dX, adds the
// normalisations' gain and bias gradients into g.
template <class T>
MatrixT<T> sub_block_backward(const SubBlockSpec<T>& b, const SubBlockCacheT<T>& c, const MatrixT<T>& X,
                              const MatrixT<T>& dOut, const BranchMap<T>& dF, BlockGradsT<T>& g);
// Tangent along dX.
template <class T>
MatrixT<T> sub_block_jvp(const SubBlockSpec<T>& b, const SubBlockCacheT<T>& c, const MatrixT<T>& X,
                         const MatrixT<T>& dX, const BranchMap<T>& dF);

}  // namespace rcsim
