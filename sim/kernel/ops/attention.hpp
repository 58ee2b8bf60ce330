// Masked softmax self-attention (SCIENCE.md section 1, steps 1 to 3).
#pragma once

#include <vector>

#include "kernel/model/mask_ranges.hpp"  // MaskRows
#include "kernel/ops/softmax.hpp"  // masked_softmax
#include "kernel/support/types.hpp"

namespace rcsim {

// Logits S = (X W_Q)(X W_K)^T / sqrt(d_QK), written into S (N x N). Q and K are workspaces.
void attention_logits(const Eigen::Ref<const Matrix>& X, const Eigen::Ref<const Matrix>& W_Q,
                      const Eigen::Ref<const Matrix>& W_K, double d_qk, Matrix& Q, Matrix& K, Matrix& S);
// Every function of this file also exists in float (run.precision = float32): the same code,
// a template on the scalar type in attention.cpp.
void attention_logits(const Eigen::Ref<const MatrixF>& X, const Eigen::Ref<const MatrixF>& W_Q,
                      const Eigen::Ref<const MatrixF>& W_K, double d_qk, MatrixF& Q, MatrixF& K, MatrixF& S);

// The same with attention biases (attention.bias): Q = X W_Q + 1 b_Q^T, K = X W_K + 1 b_K^T
// (a null bias adds nothing).
void attention_logits(const Eigen::Ref<const Matrix>& X, const Eigen::Ref<const Matrix>& W_Q, const RowVector* b_Q,
                      const Eigen::Ref<const Matrix>& W_K, const RowVector* b_K, double d_qk, Matrix& Q, Matrix& K,
                      Matrix& S);
void attention_logits(const Eigen::Ref<const MatrixF>& X, const Eigen::Ref<const MatrixF>& W_Q,
                      const RowVectorT<float>* b_Q, const Eigen::Ref<const MatrixF>& W_K, const RowVectorT<float>* b_K,
                      double d_qk, MatrixF& Q, MatrixF& K, MatrixF& S);

// Diagnostics of an attention matrix: the smallest weight over the entries the mask allows (the
// eps of the collapse theorem; 0 if a weight underflowed) and the mean over rows of the Shannon
// entropy -sum_j A_ij ln A_ij (nats).
// With LayerParams::attention_statistics a layer also reports the statistics of
// attention_statistics.hpp (else they stay 0 and `received` empty).
struct AttentionStats {
  double min_weight = 1.0;
  double mean_entropy = 0.0;
  double mean_max_weight = 0.0;   // mean over rows of max_j A_ij, averaged over heads
  double mean_sink_weight = 0.0;  // mean over rows of A_i1 (the first token's weight), averaged over heads
  double sink_rate = 0.0;         // fraction of heads whose mean sink weight exceeds kSinkThreshold
  Vector received;                // column sums c_j = sum_i A_ij (attention received), averaged over heads
};
AttentionStats attention_stats(const Eigen::Ref<const Matrix>& A, const MaskMatrix& mask);
AttentionStats attention_stats(const Eigen::Ref<const MatrixF>& A, const MaskMatrix& mask);

// --- The fast path of attention_layer (same quantities as above, fewer operations) ---


// Work matrices of attention_logits_fast (sized on first use, then reused).
template <class T>
struct LogitsWorkspaceT {
  MatrixT<T> M, P, K;
};
using LogitsWorkspace = LogitsWorkspaceT<double>;

// True if folding W_Q W_K^T into one d x d matrix costs fewer flops than X W_Q and X W_K for
// these sizes (needs d_k >= d; `lower`: only half of the N x N logits are computed).
bool fold_logits(int n, int d, int dk, bool lower);

// The logits S = (X W_Q)(X W_K)^T / sqrt(d_QK) into the row-major S, the same matrix as
// attention_logits up to rounding. When fold_logits(...) the product is regrouped as
// S = (X M) X^T with M = W_Q W_K^T / sqrt(d_QK) (d x d); otherwise Q = X W_Q / sqrt(d_QK),
// K = X W_K, S = Q K^T. With `lower` only the lower triangle (j <= i) is computed and the strict
// upper triangle is left unspecified.
void attention_logits_fast(const Eigen::Ref<const Matrix>& X, const Eigen::Ref<const Matrix>& W_Q,
                           const Eigen::Ref<const Matrix>& W_K, double d_qk, bool lower, LogitsWorkspace& ws,
                           RowMajorMatrix& S);
void attention_logits_fast(const Eigen::Ref<const MatrixF>& X, const Eigen::Ref<const MatrixF>& W_Q,
                           const Eigen::Ref<const MatrixF>& W_K, double d_qk, bool lower, LogitsWorkspaceT<float>& ws,
                           RowMajorMatrixT<float>& S);

// masked_softmax and attention_stats in one pass over a mask with contiguous rows (rows.contiguous):
// each row's allowed range is exponentiated as one vector (Eigen's vectorised exp; arguments below
// -708 by std::exp, so underflow gives exactly 0 as before), entries before the range are set to
// 0, entries after it too unless rows.lower_triangular (then the strict upper triangle is left
// unspecified: multiply by the lower triangle only). The entropy needs no logarithm per entry:
// with m the row maximum, Z = 1 + r the sum of exp(s_j - m) (r over all j but one maximum),
// H_i = -sum_j a_j ln a_j = sum_j a_j (m - s_j) + log1p(r), a sum of non-negative terms.
// `buffer` is a work vector. S may have more columns than rows (a block of rows, fused_attention.cpp):
// the ranges index its columns.
AttentionStats softmax_rows(Eigen::Ref<RowMajorMatrix> S, const MaskRows& rows, RowVector& buffer);
AttentionStats softmax_rows(Eigen::Ref<RowMajorMatrixT<float>> S, const MaskRows& rows, RowVectorT<float>& buffer);

}  // namespace rcsim
