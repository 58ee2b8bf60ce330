// Differential attention (Ye et al. 2024, "Differential Transformer", arXiv 2410.05258), one head
// of attention_layer's general path (attention.differential; kernel/block/layer.hpp):
//   [Q1 Q2] = X W_Q,h (+ 1 b_Q^T),  [K1 K2] = X W_K,h (+ 1 b_K^T)   (the head's d_k columns split in
//   halves of m = d_k / 2, so the parameter count is the paper's),
//   A = softmax(Q1 K1^T / sqrt(d_QK / 2)) - lambda softmax(Q2 K2^T / sqrt(d_QK / 2))
// on the mask (masked entries exactly 0; every row sums to 1 - lambda), and the head's output
//   A V_h                          (attention.diff_head_norm = false), or
//   s RMSNorm(A X W_V,h) W_O,h     (attention.diff_head_norm = true; eps 1e-5, the paper's per-head
//                                    GroupNorm, gain 1 at initialisation), s = 1 - lambda_init(l) as
//                                    the paper and its code (attention.diff_head_scale = lambda_init,
//                                    whatever attention.diff_lambda), or 1 - lambda (= lambda).
// d_QK / 2 is the half-head dimension m when d_QK defaults to d_k (the paper's 1/sqrt(d), d the
// size of Q1). lambda = attention.diff_lambda, or by default the paper's lambda_init at layer l,
// 0.8 - 0.6 exp(-0.3 (l - 1)): the paper's lambda = exp(lq1.lk1) - exp(lq2.lk2) + lambda_init has
// its learned part of mean 0 at initialisation (docs/science/gradients.md, "Differential attention").
// Forward, adjoint and tangent, in double and float.
#pragma once

#include "kernel/model/block_settings.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/ops/attention.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/model/grads.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// lambda_init(l) = 0.8 - 0.6 exp(-0.3 (l - 1)) for the 1-based layer l.
double diff_lambda_init(int layer);
// The lambda of layer p.layer_number: attention.diff_lambda when given, else lambda_init.
double diff_lambda(const LayerParams& p);
// The head norm's factor s: 1 - lambda_init(l) (attention.diff_head_scale = lambda_init, the paper's
// constant) or 1 - diff_lambda(p) (= lambda).
double diff_head_scale(const LayerParams& p);

// The weights of one head into A (N x N) from its Q and K (N x d_k, d_k even): A1 - lambda A2 on
// the mask. With a cache, c->A1 and c->A2 keep the two softmax maps. Returns the statistics: the
// smallest weight of A over the allowed entries (may be negative) and the mean over the two maps
// of their mean row entropy (the entropy of A itself is undefined with negative weights).
template <class T>
AttentionStats differential_weights(const MatrixT<T>& Q, const MatrixT<T>& K, const LayerParams& p, MatrixT<T>& A,
                                    HeadCacheT<T>* c);

// attention.diff_head_norm: Y (=, when `direct`, else +=) s RMSNorm(A XV) (W_O), A the
// head's weights as used (after dropout), XV = X W_V,h (+ 1 b_V^T). With a cache, c->P keeps A XV.
template <class T>
void add_normalised_head(const MatrixT<T>& A, const MatrixT<T>& XV, const LayerWeightsT<T>& w, std::size_t h,
                         const LayerParams& p, bool direct, MatrixT<T>& Y, HeadCacheT<T>* c);

// One differential head's adjoint (attention_branch_backward, kernel/ops/attention_head.hpp): dYh the
// gradient of its output; adds its weight gradients into g and its part of dX.
template <class T>
void differential_head_backward(const MatrixT<T>& X, const LayerWeightsT<T>& w, const LayerParams& p, std::size_t h,
                                const HeadCacheT<T>& c, const MatrixT<T>& dYh, BlockGradsT<T>& g, MatrixT<T>& dX);
// One differential head's tangent along dX: d(head output).
template <class T>
MatrixT<T> differential_head_jvp(const LayerWeightsT<T>& w, const LayerParams& p, std::size_t h, const HeadCacheT<T>& c,
                                 const MatrixT<T>& dX);

}  // namespace rcsim
