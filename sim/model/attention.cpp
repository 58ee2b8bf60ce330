#include "model/attention.hpp"

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

MaskRows analyse_rows(const MaskMatrix& mask) {
  MaskRows r;
  const Eigen::Index n = mask.rows();
  r.lo.assign(static_cast<std::size_t>(n), 0);
  r.hi.assign(static_cast<std::size_t>(n), 0);
  r.contiguous = mask.cols() == n;
  r.lower_triangular = r.contiguous;
  for (Eigen::Index i = 0; i < n && r.contiguous; ++i) {
    Eigen::Index j = 0;
    while (j < n && !mask(i, j)) ++j;
    const Eigen::Index lo = j;
    while (j < n && mask(i, j)) ++j;
    const Eigen::Index hi = j;
    while (j < n && !mask(i, j)) ++j;
    if (j < n || lo == hi) r.contiguous = false;  // a second range, or an empty row
    r.lo[static_cast<std::size_t>(i)] = static_cast<int>(lo);
    r.hi[static_cast<std::size_t>(i)] = static_cast<int>(hi);
    if (hi != i + 1) r.lower_triangular = false;
  }
  if (!r.contiguous) r.lower_triangular = false;
  return r;
}

bool fold_logits(int n, int d, int dk, bool lower) {
  if (dk < d) return false;
  const double N = n, D = d, K = dk, c = lower ? 1.0 : 2.0;
  const double folded = 2 * D * D * K + 2 * N * D * D + c * N * N * D;
  const double plain = 4 * N * D * K + c * N * N * K;
  return folded < plain;
}

void attention_logits_fast(const Eigen::Ref<const Matrix>& X, const Eigen::Ref<const Matrix>& W_Q,
                           const Eigen::Ref<const Matrix>& W_K, double d_qk, bool lower, LogitsWorkspace& ws,
                           RowMajorMatrix& S) {
  const Eigen::Index n = X.rows();
  const double scale = 1.0 / std::sqrt(d_qk);
  S.resize(n, n);
  const bool fold = fold_logits(static_cast<int>(n), static_cast<int>(X.cols()), static_cast<int>(W_Q.cols()), lower);
  if (fold) {
    ws.M.noalias() = W_Q * W_K.transpose();
    ws.M *= scale;
    ws.P.noalias() = X * ws.M;
  } else {
    ws.P.noalias() = X * W_Q;
    ws.P *= scale;
    ws.K.noalias() = X * W_K;
  }
  const Eigen::Ref<const Matrix> right = fold ? Eigen::Ref<const Matrix>(X) : Eigen::Ref<const Matrix>(ws.K);
  if (lower) {
    S.triangularView<Eigen::Lower>() = ws.P * right.transpose();
  } else {
    S.noalias() = ws.P * right.transpose();
  }
}

AttentionStats softmax_rows(Eigen::Ref<RowMajorMatrix> S, const MaskRows& rows, RowVector& buffer) {
  AttentionStats stats;
  const Eigen::Index n = S.rows();
  if (buffer.size() < n) buffer.resize(n);
  double entropy = 0.0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const Eigen::Index lo = rows.lo[static_cast<std::size_t>(i)], hi = rows.hi[static_cast<std::size_t>(i)];
    const Eigen::Index len = hi - lo;
    auto s = S.row(i).segment(lo, len);
    auto e = buffer.head(len);
    Eigen::Index jmax = 0;
    const double m = s.maxCoeff(&jmax);
    e.array() = (s.array() - m).exp();
    if (m - s.minCoeff() > 708.0) {
      // Eigen's exp clamps its argument near -709.4; below -708 take the exact std::exp
      // (subnormal or 0).
      for (Eigen::Index j = 0; j < len; ++j)
        if (m - s(j) > 708.0) e(j) = std::exp(s(j) - m);
    }
    const double dot = (e.array() * (m - s.array())).sum();
    const double rest = e.head(jmax).sum() + e.tail(len - jmax - 1).sum();
    const double inv = 1.0 / (1.0 + rest);
    stats.min_weight = std::min(stats.min_weight, e.minCoeff() * inv);
    entropy += dot * inv + std::log1p(rest);
    s = e * inv;
    if (lo > 0) S.row(i).head(lo).setZero();
    if (hi < n && !rows.lower_triangular) S.row(i).tail(n - hi).setZero();
  }
  stats.mean_entropy = entropy / static_cast<double>(n);
  return stats;
}

}  // namespace rcsim
