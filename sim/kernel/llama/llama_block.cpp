#include "kernel/llama/llama_block.hpp"

#include "kernel/model/mask.hpp"

namespace rcsim::llama {

ModelSpec block_spec(const LlamaConfig& c, int tokens, const ForwardOptions& o) {
  ModelSpec s;
  s.model.tokens = tokens;
  s.model.dim = c.dim;
  s.model.layers = c.layers;
  s.model.heads = c.heads;
  s.model.kv_heads = c.kv_heads;
  s.model.key_dim = c.head_size();
  s.model.value_dim = c.head_size();
  s.model.d_qk = c.head_size();
  s.model.beta = 1.0 / std::sqrt(s.model.d_qk);
  s.mask.type = MaskType::causal;
  s.norm.type = o.norm ? NormType::rmsnorm : NormType::none;
  s.norm.eps = c.norm_eps;
  s.norm.position = NormPosition::pre;
  s.norm.params_from_file = o.norm;
  s.residual_alpha = 1.0;
  s.attention.rope = true;
  s.attention.rope_theta = c.rope_theta;
  s.mlp.width = c.hidden;
  s.mlp.activation = MlpActivation::swiglu;
  return s;
}

template <class T>
LayerWeightsT<T> block_weights(const LlamaBlockT<T>& b, const LlamaConfig& c, const ForwardOptions& o) {
  const int s = c.head_size(), group = c.heads / c.kv_heads;
  LayerWeightsT<T> w;
  for (int h = 0; h < c.heads; ++h) {
    const int kv = h / group;
    w.q.push_back(b.wq.middleRows(h * s, s).transpose());
    w.k.push_back(b.wk.middleRows(kv * s, s).transpose());
    w.v.push_back(b.wv.middleRows(kv * s, s).transpose());
    w.o.push_back(b.wo.middleCols(h * s, s).transpose());
  }
  w.kv_group = group;
  w.mlp_in = b.w1.transpose();
  w.mlp_gate = b.w3.transpose();
  w.mlp_out = b.w2.transpose();
  if (o.norm) {
    w.norms_from_file = true;
    const auto rms = [&](const VectorT<T>& gain) {
      Normalization n(NormType::rmsnorm, c.dim, c.norm_eps);
      n.gain = gain.template cast<double>().transpose();
      return n;
    };
    w.norms[kNormAttn] = rms(b.attn_norm);
    w.norms[kNormMlp] = rms(b.mlp_norm);
  }
  return w;
}

void add_block_gradients(const BlockGrads& g, const LlamaConfig& c, LlamaBlock& into) {
  const int s = c.head_size();
  for (int h = 0; h < c.heads; ++h) {
    into.wq.middleRows(h * s, s) += g.dq[static_cast<std::size_t>(h)].transpose();
    into.wo.middleCols(h * s, s) += g.dout[static_cast<std::size_t>(h)].transpose();
  }
  for (int j = 0; j < c.kv_heads; ++j) {  // one entry per key/value head (fold_kv_grads)
    into.wk.middleRows(j * s, s) += g.dk[static_cast<std::size_t>(j)].transpose();
    into.wv.middleRows(j * s, s) += g.dv[static_cast<std::size_t>(j)].transpose();
  }
  into.w1 += g.mlp.d_in.transpose();
  into.w3 += g.mlp.d_gate.transpose();
  into.w2 += g.mlp.d_out.transpose();
  if (g.dgain[kNormAttn].size() > 0) into.attn_norm += g.dgain[kNormAttn].transpose();
  if (g.dgain[kNormMlp].size() > 0) into.mlp_norm += g.dgain[kNormMlp].transpose();
}

template <class T>
BlockStack<T>::BlockStack(const LlamaModelT<T>& m, int tokens, const ForwardOptions& o)
    : spec_(block_spec(m.config, tokens, o)),
      mask_(causal_mask(tokens)),
      layers_(m.config.layers),
      depth_(o.depth > 0 ? o.depth : m.config.layers) {
  for (const auto& b : m.blocks) weights_.push_back(block_weights<T>(b, m.config, o));
  params_ = block_params(spec_, &mask_, &none_);
  params_.single = std::is_same_v<T, float>;
  params_.cancel = o.cancel;
}

template <class T>
MatrixT<T> BlockStack<T>::forward(MatrixT<T> X, std::vector<MatrixT<T>>* states) const {
  BlockWorkspaceT<T> ws(static_cast<int>(X.rows()), static_cast<int>(X.cols()), spec_.model.key_dim);
  MatrixT<T> next;
  if (states) states->push_back(X);
  for (int t = 0; t < depth_; ++t) {
    transformer_block(X, weights(t), at(t), ws, next);
    X.swap(next);
    if (states) states->push_back(X);
  }
  return X;
}

template LayerWeightsT<double> block_weights(const LlamaBlockT<double>&, const LlamaConfig&, const ForwardOptions&);
template LayerWeightsT<float> block_weights(const LlamaBlockT<float>&, const LlamaConfig&, const ForwardOptions&);
template class BlockStack<double>;
template class BlockStack<float>;

}  // namespace rcsim::llama
