#include "kernel/block/backward.hpp"

#include <stdexcept>
#include <vector>

#include "kernel/model/kv_heads.hpp"
#include "kernel/ops/noise.hpp"
#include "kernel/block/block_derivatives.hpp"
#include "kernel/model/parameters.hpp"

namespace rcsim {

namespace {

template <class T>
void block_backward_impl(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p,
                         const MatrixT<T>& dX_next, BlockGradsT<T>& g, RandomStream* dropout, RandomStream* noise) {
  const bool noisy = p.noise && p.noise->scale > 0.0;
  if (noisy && !noise) throw std::logic_error("block_backward: dynamics.noise needs the noise stream of the block");
  ParameterDims dims = parameter_dims(w);
  dims.kv_heads = dims.heads;  // model.kv_heads: a gradient per query head's copy, summed by fold_kv_grads below
  size_gradients(dims, g);
  BlockCacheT<T> cache;
  const MatrixT<T> out = block_forward_cached<T>(X, w, p, dropout, cache);
  MatrixT<T> dOut = dX_next;
  if (noisy) {  // X_next = P(out + scale G) in double, as the callers (run_trial, the replay) apply it
    Matrix next = out.template cast<double>(), before;
    apply_dynamics_noise(next, p.noise->scale, *noise, *p.noise->norm, &before);
    RowVector dgain, dbias;  // the noise's P (none or sphere) has no parameters
    dOut = norm_backward<double>(before, dX_next.template cast<double>(), *p.noise->norm, dgain, dbias)
               .template cast<T>();
  }
  g.dX = block_adjoint<T>(X, w, p, cache, dOut, g);
  fold_kv_grads(g, w.kv_group);  // model.kv_heads: one gradient per shared W_K, W_V (b_K, b_V)
}

}  // namespace

void block_backward(const MatrixF& X, const LayerWeightsT<float>& w, const BlockParams& p, const MatrixF& dX_next,
                    BlockGradsT<float>& g, RandomStream* dropout, RandomStream* noise) {
  block_backward_impl<float>(X, w, p, dX_next, g, dropout, noise);
}

void widen_grads(const BlockGradsT<float>& f, BlockGrads& g) { cast_gradients(f, g); }

void block_backward(const Matrix& X, const LayerWeights& w, const BlockParams& p, const Matrix& dX_next,
                    BlockGrads& g, RandomStream* dropout, RandomStream* noise) {
  if (!p.single) {
    block_backward_impl<double>(X, w, p, dX_next, g, dropout, noise);
    return;
  }
  // run.precision = float32: the block's adjoint in float on the tokens, weights and cotangent
  // rounded to float (X holds float values exactly: the forward's tokens), widened afterwards.
  LayerWeightsT<float> wf;
  cast_weights(w, wf);
  BlockGradsT<float> gf;
  block_backward_impl<float>(X.cast<float>(), wf, p, dX_next.cast<float>(), gf, dropout, noise);
  widen_grads(gf, g);
}

template <class T>
MatrixT<T> attention_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p,
                              const MatrixT<T>& dY, BlockGradsT<T>& g) {
  if (p.dropout && (p.dropout->attention > 0.0 || p.dropout->output > 0.0))
    throw std::logic_error("attention_backward: dropout needs block_backward's dropout stream");
  static const Normalization identity;
  LayerParams inner = p;  // the branch alone
  inner.alpha = 0.0;
  inner.norm = &identity;
  inner.keep_attention = false;
  inner.project = ResidualProject::none;
  inner.integrator = Integrator::euler;
  const int n = static_cast<int>(X.rows()), d = static_cast<int>(X.cols());
  LayerWorkspaceT<T> ws(n, d, d);
  LayerCacheT<T> c;
  MatrixT<T> Y;
  attention_layer(X, w, inner, ws, Y, &c);
  return attention_branch_backward<T>(X, w, inner, c, dY, g);
}

template Matrix attention_backward<double>(const Matrix&, const LayerWeights&, const LayerParams&, const Matrix&,
                                          BlockGrads&);
template MatrixF attention_backward<float>(const MatrixF&, const LayerWeightsT<float>&, const LayerParams&,
                                           const MatrixF&, BlockGradsT<float>&);

}  // namespace rcsim
