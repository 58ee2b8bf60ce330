// Masked softmax self-attention (SCIENCE.md section 1, steps 1 to 3).
#pragma once

#include "types.hpp"

namespace rcsim {

// Logits S = (X W_Q)(X W_K)^T / sqrt(d_QK), written into S (N x N). Q and K are workspaces.
void attention_logits(const Eigen::Ref<const Matrix>& X, const Eigen::Ref<const Matrix>& W_Q,
                      const Eigen::Ref<const Matrix>& W_K, double d_qk, Matrix& Q, Matrix& K, Matrix& S);

// Row-wise softmax of S (n x m, the mask of the same shape; m = n for self-attention) restricted
// to the entries the mask allows, in place: each row has its allowed maximum subtracted before
// exponentiation (log-sum-exp form); masked entries are set to exactly 0. Every row sums to 1 (each row has its self-loop, so at least one allowed entry).
void masked_softmax(Eigen::Ref<Matrix> S, const MaskMatrix& mask);

// Diagnostics of an attention matrix: the smallest weight over the entries the mask allows (the
// eps of the collapse theorem; 0 if a weight underflowed) and the mean over rows of the Shannon
// entropy -sum_j A_ij ln A_ij (nats).
struct AttentionStats {
  double min_weight = 1.0;
  double mean_entropy = 0.0;
};
AttentionStats attention_stats(const Eigen::Ref<const Matrix>& A, const MaskMatrix& mask);

}  // namespace rcsim
