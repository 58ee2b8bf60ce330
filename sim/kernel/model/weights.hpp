// Weights W_Q, W_K, W_V and initial tokens X(0) (SCIENCE.md section 3), from random draws,
// constants, inline matrices or HDF5 files.
#pragma once

#include <optional>
#include <vector>

#include "kernel/model/model_spec.hpp"
#include "kernel/model/normalization_params.hpp"
#include "kernel/model/random.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// The normalisations of a block (model/block.hpp): attention side before/after, MLP side.
// post uses attn (and mlp) after the residual sum; pre uses attn (and mlp) on the sub-block's
// input; peri uses all four (the *_out ones on the sub-block's output).
enum NormSlot { kNormAttn = 0, kNormAttnOut = 1, kNormMlp = 2, kNormMlpOut = 3 };
// Dataset name stems in weights.file (norm.params = file): /norm_attn_gain, /norm_attn_bias, ...
const char* norm_slot_name(int slot);

// The weights of one layer: one matrix per head, the MLP's, and per-layer normalisations.
// T = double; float for run.precision = float32 (cast_weights).
template <class T>
struct LayerWeightsT {
  std::vector<MatrixT<T>> q, k, v;  // q[h], k[h]: d x d_k; v[h]: d x d (d x d_v with model.value_dim)
  // model.kv_heads: query heads per key/value head; k, v, k_bias, v_bias hold a copy per query head
  // (kernel/model/kv_heads.hpp: share_kv_heads), their gradients one entry per key/value head.
  int kv_group = 1;
  std::vector<MatrixT<T>> o;        // o[h]: d_v x d (model.value_dim > 0); empty = no output projection
  std::vector<MatrixT<T>> logits;   // logits[h]: N x N i.i.d. N(0, 1) (attention.kind = random_markov)
  std::vector<MatrixT<T>> logit_bias;  // logit_bias[h]: N x N, B_h (attention.logit_bias = file); else empty
  // attention.bias: b_Q[h], b_K[h] (d_k), b_V[h] (d_v or d), b_O (d); empty = no attention biases.
  std::vector<RowVectorT<T>> q_bias, k_bias, v_bias;
  RowVectorT<T> o_bias;
  MatrixT<T> mlp_in, mlp_out;       // d x m and m x d (mlp.width = m > 0); empty = no MLP
  RowVectorT<T> mlp_in_bias, mlp_out_bias;  // m and d (mlp.bias); empty = no bias
  MatrixT<T> mlp_gate;                      // d x m, the gate of mlp.activation = swiglu; empty without (no bias)
  bool norms_from_file = false;             // norm.params = file: norms[slot] replace norm.gain/bias
  Normalization norms[4];                   // (double; rounded where they are applied)
};
using LayerWeights = LayerWeightsT<double>;

// `out` = `w` rounded to float (run.precision = float32).
void cast_weights(const LayerWeights& w, LayerWeightsT<float>& out);

// Arrays read from weights.file and init.file, checked against the configuration once, before
// any trial runs. Shapes (C order, row convention):
//   /X0   [N, d] or [trials, N, d]
//   /W_Q, /W_K  [d, d_k] or [L, d, d_k]; with H > 1: [H, d, d_k] or [L, H, d, d_k]
//   /W_V  [d, d] or [L, d, d];           with H > 1: [H, d, d] or [L, H, d, d]
//         (W_K, W_V, b_K, b_V with model.kv_heads = H_kv: H_kv in place of H, no head axis for H_kv = 1)
//         (d_v in place of the last d with model.value_dim = d_v > 0)
//   /W_O  [d_v, d] or [L, d_v, d];       with H > 1: [H, d_v, d] or [L, H, d_v, d]
//   /W_in [d, m] or [L, d, m], /W_out [m, d] or [L, m, d], /b_in [m] or [L, m], /b_out [d] or [L, d]
//   /W_gate [d, m] or [L, d, m] (mlp.activation = swiglu)
//   /norm_{attn,attn_out,mlp,mlp_out}_{gain,bias}  [d] or [L, d] (only those the block uses;
//         no bias for rmsnorm)
//   attention.bias = true: /b_Q, /b_K [d_k] or [L, d_k] (with weights.q, weights.k = file),
//         /b_V [d_v] or [L, d_v] (weights.v = file; d_v = d without model.value_dim); with H > 1
//         [H, ..] or [L, H, ..]; /b_O [d] or [L, d] (weights.o = file, or weights.v = file
//         without model.value_dim)
//   attention.logit_bias = file: /logit_bias [N, N] or [L, N, N]; with H > 1 [H, N, N] or
//         [L, H, N, N] (finite values; the mask, not the bias, forbids entries)
// These arrays are the kernel's weight source: the io layer fills them from weights.file and
// init.file (io/inputs.hpp), Python from NumPy arrays; the kernel never reads a file.
struct InputArrays {
  std::optional<NdArray> x0, w_q, w_k, w_v, w_o, w_in, w_out, b_in, b_out;
  std::optional<NdArray> w_gate;              // mlp.activation = swiglu
  std::optional<NdArray> b_q, b_k, b_v, b_o;  // attention.bias
  std::optional<NdArray> logit_bias;          // attention.logit_bias = file
  std::optional<NdArray> norm_gain[4], norm_bias[4];
};

// One array a model takes from its weight source: the key that names the source
// ("init.file" or "weights.file"), the dataset name, the shapes allowed, and where it goes.
struct InputRequirement {
  const char* key;
  std::string dataset;
  std::vector<Extents> shapes;
  std::optional<NdArray>* target;
  std::string axes = "";  // the keys that set the shape ("[d, d_k]: model.dim = 4, model.key_dim = 4"), for messages
};
// The arrays `c` needs (none for a model of random, fixed and identity weights), in the order
// they are read, with targets in `into`.
std::vector<InputRequirement> input_requirements(const ModelSpec& c, InputArrays& into);
// "[3, 4]" (an array's shape in messages).
std::string shape_string(const Extents& shape);
// Checks `a` against `r`: UsageError "KEY 'SOURCE': dataset /NAME has shape [..], expected [..] or
// [..] (AXES)" for a wrong shape, AXES naming the keys that set it (r.axes).
void check_input_shape(const InputRequirement& r, const std::string& source, const NdArray& a);
// UsageError "KEY 'SOURCE': dataset /NAME holds a non-finite value (...)" if `a` holds NaN or inf.
void check_input_finite(const InputRequirement& r, const std::string& source, const NdArray& a);

// Draws the weights of each layer of one trial. Random weights come from the trial's stream in
// a fixed order (layer by layer; within a layer W_Q of every head, then W_K, then W_V, then W_O
// of every head (model.value_dim > 0), then W_in, (W_gate with mlp.activation = swiglu,) b_in, W_out,
// b_out (mlp.width > 0; a bias only when its std is > 0)); with weights.shared one draw serves every layer. Without value_dim and
// MLP the draws are exactly those of the attention-only model. With model.kv_heads = H_kv < H the
// draws are the same (W_K, W_V of every query head), and key/value head j keeps those of query head
// j H / H_kv, the first of its group (kernel/model/kv_heads.hpp); the others are discarded. Attention biases (attention.bias)
// draw nothing: zero, or read from weights.file after the draws of the layer.
// Peer dynamics (docs/science/peers.md): with weights.redraw_every = K the weights are drawn at layers 0, K,
// 2K, ... and kept in between; with weights.across_trials = shared they come from one stream
// (seed, trial 0, stream 2) restarted for every trial, so all trials see the same weights; with
// weights.qk a bilinear form B (bilinear.hpp) is drawn per head in place of W_Q (W_K = identity);
// weights.v = wishart draws G G^T / sqrt(d), tied_qk sets W_V = weights.v_sign * W_Q W_K^T.
class WeightSampler {
 public:
  // Keeps a reference to `files`, which must outlive the sampler: a temporary does not compile.
  WeightSampler(const ModelSpec& c, const InputArrays& files);
  WeightSampler(const ModelSpec& c, InputArrays&& files) = delete;
  // Start a new trial: with shared weights, draws them now.
  void begin_trial(RandomStream& rng);
  // The stream the weights come from: the trial's, or the one shared across trials.
  RandomStream& source(RandomStream& trial_rng) { return own_ ? *own_ : trial_rng; }
  // The weights of `layer` (valid until the next call).
  const LayerWeights& layer(int layer, RandomStream& rng);

 private:
  void draw(int layer, RandomStream& rng, LayerWeights& out) const;
  void draw_one(const WeightSpec& spec, const std::optional<NdArray>& file, int layer, int head,
                int rows, int cols, RandomStream& rng, Matrix& out, int group = 1) const;
  void draw_mlp(int layer, RandomStream& rng, LayerWeights& out) const;
  void load_norms(int layer, LayerWeights& out) const;
  void load_attention_biases(int layer, LayerWeights& out) const;
  const ModelSpec& c_;
  const InputArrays& files_;
  LayerWeights current_;
  std::optional<RandomStream> own_;
};

// X(0) of `trial`, drawn from `rng` for the random types:
//   gaussian: i.i.d. N(0, 1) entries; sphere: Gaussian rows scaled to unit norm (uniform on the
//   sphere); positive: absolute values of Gaussian rows, scaled to unit norm (uniform on the
//   sphere's positive orthant); fixed: init.matrix; file: /X0 of init.file; uniform: i.i.d.
//   entries 2u - 1 uniform on (-1, 1), row by row.
Matrix initial_tokens(const ModelSpec& c, const InputArrays& files, int trial, RandomStream& rng);

}  // namespace rcsim
