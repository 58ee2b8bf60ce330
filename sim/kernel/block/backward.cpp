#include "kernel/block/backward.hpp"

#include <stdexcept>
#include <vector>

#include "kernel/model/kv_heads.hpp"
#include "kernel/model/noise.hpp"
#include "kernel/ops/block.hpp"

namespace rcsim {

namespace {

template <class T>
void size_grads(const LayerWeightsT<T>& w, BlockGradsT<T>& g) {
  const auto zeros = [](const std::vector<MatrixT<T>>& m, std::vector<MatrixT<T>>& out) {
    out.clear();
    for (const auto& x : m) out.push_back(MatrixT<T>::Zero(x.rows(), x.cols()));
  };
  zeros(w.q, g.dq);
  zeros(w.k, g.dk);
  zeros(w.v, g.dv);
  zeros(w.o, g.dout);
  const auto zero_rows = [](const std::vector<RowVectorT<T>>& b, std::vector<RowVectorT<T>>& out) {
    out.clear();
    for (const auto& x : b) out.push_back(RowVectorT<T>::Zero(x.size()));
  };
  zero_rows(w.q_bias, g.dq_bias);
  zero_rows(w.k_bias, g.dk_bias);
  zero_rows(w.v_bias, g.dv_bias);
  g.dout_bias = RowVectorT<T>::Zero(w.o_bias.size());
  g.mlp = MlpGradsT<T>{};
  const Eigen::Index d = w.q.empty() ? 0 : w.q[0].rows();
  for (int s = 0; s < 4; ++s) {
    g.dgain[s] = RowVectorT<T>::Zero(d);
    g.dbias[s] = RowVectorT<T>::Zero(d);
  }
}

template <class T>
void block_backward_impl(const MatrixT<T>& X, const LayerWeightsT<T>& w, const BlockParams& p,
                         const MatrixT<T>& dX_next, BlockGradsT<T>& g, RandomStream* dropout, RandomStream* noise) {
  const bool noisy = p.noise && p.noise->scale > 0.0;
  if (noisy && !noise) throw std::logic_error("block_backward: dynamics.noise needs the noise stream of the block");
  size_grads(w, g);
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

std::vector<Matrix> widen(const std::vector<MatrixF>& v) {
  std::vector<Matrix> out;
  out.reserve(v.size());
  for (const auto& m : v) out.push_back(m.cast<double>());
  return out;
}
std::vector<RowVector> widen(const std::vector<RowVectorT<float>>& v) {
  std::vector<RowVector> out;
  out.reserve(v.size());
  for (const auto& m : v) out.push_back(m.cast<double>());
  return out;
}

}  // namespace

void block_backward(const MatrixF& X, const LayerWeightsT<float>& w, const BlockParams& p, const MatrixF& dX_next,
                    BlockGradsT<float>& g, RandomStream* dropout, RandomStream* noise) {
  block_backward_impl<float>(X, w, p, dX_next, g, dropout, noise);
}

void widen_grads(const BlockGradsT<float>& f, BlockGrads& g) {
  g.dX = f.dX.cast<double>();
  g.dq = widen(f.dq);
  g.dk = widen(f.dk);
  g.dv = widen(f.dv);
  g.dout = widen(f.dout);
  g.dq_bias = widen(f.dq_bias);
  g.dk_bias = widen(f.dk_bias);
  g.dv_bias = widen(f.dv_bias);
  g.dout_bias = f.dout_bias.cast<double>();
  g.mlp.d_in = f.mlp.d_in.cast<double>();
  g.mlp.d_out = f.mlp.d_out.cast<double>();
  g.mlp.d_in_bias = f.mlp.d_in_bias.cast<double>();
  g.mlp.d_out_bias = f.mlp.d_out_bias.cast<double>();
  for (int s = 0; s < 4; ++s) {
    g.dgain[s] = f.dgain[s].cast<double>();
    g.dbias[s] = f.dbias[s].cast<double>();
  }
}

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

}  // namespace rcsim
