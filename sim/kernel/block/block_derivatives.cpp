#include "kernel/block/block_derivatives.hpp"

#include <stdexcept>

#include "kernel/ops/attention_head.hpp"
#include "kernel/ops/flow_step.hpp"
#include "kernel/ops/mlp.hpp"
#include "kernel/ops/sub_block.hpp"

namespace rcsim {

namespace {

// The attention branch alone: A(.) without residual, normalisation, projection or RK4.
LayerParams branch_params(const LayerParams& p) {
  static const Normalization identity;
  LayerParams inner = p;
  inner.alpha = 0.0;
  inner.norm = &identity;
  inner.keep_attention = false;
  inner.project = ResidualProject::none;
  inner.integrator = Integrator::euler;
  return inner;
}

template <class T>
const Normalization& norm_of(const LayerWeightsT<T>& w, const BlockParams& p, int slot) {
  return w.norms_from_file ? w.norms[slot] : *p.layer.norm;
}

}  // namespace

template <class T>
MatrixT<T> block_forward_cached(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p,
                                RandomStream* dropout, BlockCacheT<T>& c) {
  const Dropout* drop = p.layer.dropout;
  if (drop && (drop->attention > 0.0 || drop->output > 0.0) && !dropout)
    throw std::logic_error("block derivative: dropout needs the dropout stream of the block");
  BlockParams q = p;
  q.layer.keep_attention = false;
  Dropout copy;
  if (drop) {
    copy = *drop;
    copy.rng = dropout;
    q.layer.dropout = &copy;
  }
  const int n = static_cast<int>(X.rows()), d = static_cast<int>(X.cols());
  BlockWorkspaceT<T> ws(n, d, d);
  MatrixT<T> out;
  transformer_block(X, w, q, ws, out, &c);
  return out;
}

template <class T>
MatrixT<T> block_adjoint(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p,
                         const BlockCacheT<T>& c, const MatrixT<T>& dOut, BlockGradsT<T>& g) {
  const LayerParams inner = branch_params(p.layer);
  const bool tangent = p.layer.tangent();  // residual.project = tangent (post, no MLP): F(X) = P_X(A(X))
  if (p.layer.rk4())
    return rk4_backward<T>(w, inner, tangent, norm_of(w, p, kNormAttn), static_cast<T>(p.layer.alpha), c.layer,
                           dOut, g);
  MatrixT<T> dMiddle = dOut;
  if (w.mlp_in.size() > 0) {
    const BranchMap<T> mlp_back = [&](const MatrixT<T>& in, const MatrixT<T>& dM) {
      const MatrixT<T>& D = c.mlp_cache.D;
      return mlp_backward<T>(in, w, p.activation, c.mlp_cache, D.size() ? MatrixT<T>(dM.cwiseProduct(D)) : dM, g.mlp);
    };
    dMiddle = sub_block_backward<T>(mlp_sub_block<T>(w, p), c.mlp, c.mlp.in, dOut, mlp_back, g);
  }
  const BranchMap<T> attn_back = [&](const MatrixT<T>& in, const MatrixT<T>& dY) {
    return field_backward<T>(in, c.layer.F, w, inner, tangent, c.layer, dY, g);
  };
  return sub_block_backward<T>(attention_sub_block<T>(w, p), c.attention, X, dMiddle, attn_back, g);
}

template <class T>
MatrixT<T> block_tangent(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p,
                         const BlockCacheT<T>& c, const MatrixT<T>& dX) {
  const LayerParams inner = branch_params(p.layer);
  const bool tangent = p.layer.tangent();
  if (p.layer.rk4())
    return rk4_jvp<T>(w, inner, tangent, norm_of(w, p, kNormAttn), static_cast<T>(p.layer.alpha), c.layer, dX);
  const BranchMap<T> attn_jvp = [&](const MatrixT<T>& in, const MatrixT<T>& din) {
    return field_jvp<T>(in, c.layer.F, w, inner, tangent, c.layer, din);
  };
  const MatrixT<T> dMiddle = sub_block_jvp<T>(attention_sub_block<T>(w, p), c.attention, X, dX, attn_jvp);
  if (w.mlp_in.size() == 0) return dMiddle;
  const BranchMap<T> mlp_jvp_map = [&](const MatrixT<T>&, const MatrixT<T>& din) {
    const MatrixT<T> dM = mlp_jvp<T>(w, p.activation, c.mlp_cache, din);
    return c.mlp_cache.D.size() ? MatrixT<T>(dM.cwiseProduct(c.mlp_cache.D)) : dM;
  };
  return sub_block_jvp<T>(mlp_sub_block<T>(w, p), c.mlp, c.mlp.in, dMiddle, mlp_jvp_map);
}

#define RCSIM_BLOCK_OPS(T)                                                                                        \
  template MatrixT<T> block_forward_cached<T>(const MatrixT<T>&, const LayerWeightsT<T>&, const BlockParams&,     \
                                              RandomStream*, BlockCacheT<T>&);                                    \
  template MatrixT<T> block_adjoint<T>(const MatrixT<T>&, const LayerWeightsT<T>&, const BlockParams&,            \
                                       const BlockCacheT<T>&, const MatrixT<T>&, BlockGradsT<T>&);                \
  template MatrixT<T> block_tangent<T>(const MatrixT<T>&, const LayerWeightsT<T>&, const BlockParams&,            \
                                       const BlockCacheT<T>&, const MatrixT<T>&);
RCSIM_BLOCK_OPS(double)
RCSIM_BLOCK_OPS(float)
#undef RCSIM_BLOCK_OPS

}  // namespace rcsim
