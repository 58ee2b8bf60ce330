// A llama2.c model as a configuration of the main block (issue 45): each Llama block is
// transformer_block (kernel/block/block.hpp) with the settings
//   norm.position = pre, norm.type = rmsnorm (eps 1e-5) with the block's gains (norm.params = file;
//   norm = false: none), residual.alpha = 1, mask.type = causal, model.heads = H,
//   model.kv_heads = H_kv, model.key_dim = model.value_dim = s (the head size d / H), model.d_qk = s,
//   attention.rope = true (adjacent pairs, attention.rope_theta), mlp.activation = swiglu,
//   mlp.width = hidden,
// and the weights of the checkpoint's [out, in] matrices in the main block's [in, out] shapes:
//   W_Q,h = (rows h s .. h s + s - 1 of wq)^T [d, s], W_K,h and W_V,h those of key/value head h / g
//   of wk, wv (g = H / H_kv; model/kv_heads.hpp), W_O,h = (columns h s .. of wo)^T [s, d]
//   (sum_h att_h W_O,h = att wo^T), W_in = w1^T, W_gate = w3^T, W_out = w2^T.
// So every derivative pass, the measures and the platforms of the main block serve the pretrained
// model; only the token embedding, the final RMSNorm and the classifier are the model's own
// (kernel/llama/llama_forward.hpp).
#pragma once

#include <vector>

#include "kernel/block/block.hpp"
#include "kernel/llama/llama_model.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/model/grads.hpp"

namespace rcsim::llama {

struct ForwardOptions {
  bool norm = true;  // false: every RMSNorm (the blocks' and the final one) is the identity
  int depth = 0;     // blocks applied; 0: L. Beyond L the blocks repeat cyclically (block t mod L),
                     // a probe of the pretrained weights at depth, not the trained model
  // The run's stop flag (SIGINT, SIGTERM, Ctrl-C in Python): every loop over blocks stops within one
  // block, throwing Interrupted (at_layer). nullptr = never stopped.
  const std::atomic<bool>* cancel = nullptr;
};

// The main block's settings of the model's blocks on `tokens` tokens.
ModelSpec block_spec(const LlamaConfig& c, int tokens, const ForwardOptions& o);

// Block b's weights in the main block's shapes (above); with o.norm false no gains.
template <class T>
LayerWeightsT<T> block_weights(const LlamaBlockT<T>& b, const LlamaConfig& c, const ForwardOptions& o);

// The main block's gradients g of one block added into `into` (shaped as the model's block):
// the inverse map of block_weights (dwq rows h s .. = dW_Q,h^T, ...; W_K and W_V already summed
// over each group by block_backward).
void add_block_gradients(const BlockGrads& g, const LlamaConfig& c, LlamaBlock& into);

// The model's blocks as a stack of main blocks on a sequence of `tokens` tokens (positions 0 ..):
// block t of the stack is model block t mod L, run by transformer_block with at(t).
template <class T>
class BlockStack {
 public:
  BlockStack(const LlamaModelT<T>& m, int tokens, const ForwardOptions& o);
  int depth() const { return depth_; }
  BlockParams at(int t) const { return at_layer(params_, t); }
  const LayerWeightsT<T>& weights(int t) const { return weights_[static_cast<std::size_t>(t % layers_)]; }
  // X(depth) of X(0) = X [tokens, d]; with `states`, X(0) .. X(depth) appended there.
  MatrixT<T> forward(MatrixT<T> X, std::vector<MatrixT<T>>* states = nullptr) const;

 private:
  ModelSpec spec_;
  MaskMatrix mask_;
  Normalization none_;
  std::vector<LayerWeightsT<T>> weights_;
  BlockParams params_;
  int layers_ = 1, depth_ = 0;
};

}  // namespace rcsim::llama
