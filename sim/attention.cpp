#include "attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rcsim {

void attention_logits(const Eigen::Ref<const Matrix>& X, const Eigen::Ref<const Matrix>& W_Q,
                      const Eigen::Ref<const Matrix>& W_K, double d_qk, Matrix& Q, Matrix& K, Matrix& S) {
  Q.noalias() = X * W_Q;
  K.noalias() = X * W_K;
  S.noalias() = Q * K.transpose();
  S *= 1.0 / std::sqrt(d_qk);
}

void masked_softmax(Eigen::Ref<Matrix> S, const MaskMatrix& mask) {
  const Eigen::Index n = S.rows(), m = S.cols();  // m = n for self-attention
  for (Eigen::Index i = 0; i < n; ++i) {
    double row_max = -std::numeric_limits<double>::infinity();
    for (Eigen::Index j = 0; j < m; ++j)
      if (mask(i, j)) row_max = std::max(row_max, S(i, j));
    double sum = 0.0;
    for (Eigen::Index j = 0; j < m; ++j) {
      const double a = mask(i, j) ? std::exp(S(i, j) - row_max) : 0.0;
      S(i, j) = a;
      sum += a;
    }
    // sum >= 1: the maximal allowed entry contributes exp(0) = 1.
    const double inv = 1.0 / sum;
    for (Eigen::Index j = 0; j < m; ++j) S(i, j) *= inv;
  }
}

AttentionStats attention_stats(const Eigen::Ref<const Matrix>& A, const MaskMatrix& mask) {
  AttentionStats s;
  const Eigen::Index n = A.rows();
  double entropy = 0.0;
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < n; ++j) {
      if (!mask(i, j)) continue;
      const double a = A(i, j);
      s.min_weight = std::min(s.min_weight, a);
      if (a > 0.0) entropy -= a * std::log(a);
    }
  }
  s.mean_entropy = entropy / static_cast<double>(n);
  return s;
}

}  // namespace rcsim
