#include "kernel/ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace rcsim {

// Every computation below is a template on the scalar type T (double; float for
// run.precision = float32), with the public overloads for double and float at the end.
namespace {

template <class T>
void logits_impl(const Eigen::Ref<const MatrixT<T>>& X, const Eigen::Ref<const MatrixT<T>>& W_Q,
                 const Eigen::Ref<const MatrixT<T>>& W_K, double d_qk, MatrixT<T>& Q, MatrixT<T>& K, MatrixT<T>& S,
                 const RowVectorT<T>* b_Q = nullptr, const RowVectorT<T>* b_K = nullptr) {
  Q.noalias() = X * W_Q;
  if (b_Q) Q.rowwise() += *b_Q;
  K.noalias() = X * W_K;
  if (b_K) K.rowwise() += *b_K;
  S.noalias() = Q * K.transpose();
  S *= static_cast<T>(1.0 / std::sqrt(d_qk));
}

template <class T>
AttentionStats stats_impl(const Eigen::Ref<const MatrixT<T>>& A, const MaskMatrix& mask) {
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

}  // namespace

void attention_logits(const Eigen::Ref<const Matrix>& X, const Eigen::Ref<const Matrix>& W_Q,
                      const Eigen::Ref<const Matrix>& W_K, double d_qk, Matrix& Q, Matrix& K, Matrix& S) {
  logits_impl<double>(X, W_Q, W_K, d_qk, Q, K, S);
}
void attention_logits(const Eigen::Ref<const MatrixF>& X, const Eigen::Ref<const MatrixF>& W_Q,
                      const Eigen::Ref<const MatrixF>& W_K, double d_qk, MatrixF& Q, MatrixF& K, MatrixF& S) {
  logits_impl<float>(X, W_Q, W_K, d_qk, Q, K, S);
}
void attention_logits(const Eigen::Ref<const Matrix>& X, const Eigen::Ref<const Matrix>& W_Q, const RowVector* b_Q,
                      const Eigen::Ref<const Matrix>& W_K, const RowVector* b_K, double d_qk, Matrix& Q, Matrix& K,
                      Matrix& S) {
  logits_impl<double>(X, W_Q, W_K, d_qk, Q, K, S, b_Q, b_K);
}
void attention_logits(const Eigen::Ref<const MatrixF>& X, const Eigen::Ref<const MatrixF>& W_Q,
                      const RowVectorT<float>* b_Q, const Eigen::Ref<const MatrixF>& W_K, const RowVectorT<float>* b_K,
                      double d_qk, MatrixF& Q, MatrixF& K, MatrixF& S) {
  logits_impl<float>(X, W_Q, W_K, d_qk, Q, K, S, b_Q, b_K);
}
AttentionStats attention_stats(const Eigen::Ref<const Matrix>& A, const MaskMatrix& mask) {
  return stats_impl<double>(A, mask);
}
AttentionStats attention_stats(const Eigen::Ref<const MatrixF>& A, const MaskMatrix& mask) {
  return stats_impl<float>(A, mask);
}

bool fold_logits(int n, int d, int dk, bool lower) {
  if (dk < d) return false;
  const double N = n, D = d, K = dk, c = lower ? 1.0 : 2.0;
  const double folded = 2 * D * D * K + 2 * N * D * D + c * N * N * D;
  const double plain = 4 * N * D * K + c * N * N * K;
  return folded < plain;
}

namespace {

template <class T>
void logits_fast_impl(const Eigen::Ref<const MatrixT<T>>& X, const Eigen::Ref<const MatrixT<T>>& W_Q,
                      const Eigen::Ref<const MatrixT<T>>& W_K, double d_qk, bool lower, LogitsWorkspaceT<T>& ws,
                      RowMajorMatrixT<T>& S) {
  const Eigen::Index n = X.rows();
  const T scale = static_cast<T>(1.0 / std::sqrt(d_qk));
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
  using Ref = Eigen::Ref<const MatrixT<T>>;
  const Ref right = fold ? Ref(X) : Ref(ws.K);
  if (lower) {
    S.template triangularView<Eigen::Lower>() = ws.P * right.transpose();
  } else {
    S.noalias() = ws.P * right.transpose();
  }
}

template <class T>
AttentionStats softmax_rows_impl(Eigen::Ref<RowMajorMatrixT<T>> S, const MaskRows& rows, RowVectorT<T>& buffer) {
  AttentionStats stats;
  const Eigen::Index n = S.rows(), cols = S.cols();  // cols > n: a block of rows (fused_attention.cpp)
  if (buffer.size() < cols) buffer.resize(cols);
  double entropy = 0.0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const Eigen::Index lo = rows.lo[static_cast<std::size_t>(i)], hi = rows.hi[static_cast<std::size_t>(i)];
    const Eigen::Index len = hi - lo;
    auto s = S.row(i).segment(lo, len);
    auto e = buffer.head(len);
    // The maximum (vectorised), then its first index (the one maxCoeff(&j) would give): a scan
    // that stops there, where maxCoeff(&j) is a scalar pass over the whole row.
    const T m = s.maxCoeff();
    Eigen::Index jmax = 0;
    while (jmax < len - 1 && !(s(jmax) == m)) ++jmax;
    e.array() = (s.array() - m).exp();
    // Eigen's exp clamps its argument near -709.4 (double; -87.3 float); beyond the threshold
    // take the exact std::exp (subnormal or 0).
    const T limit = std::is_same<T, float>::value ? T(86) : T(708);
    if (m - s.minCoeff() > limit) {
      for (Eigen::Index j = 0; j < len; ++j)
        if (m - s(j) > limit) e(j) = std::exp(s(j) - m);
    }
    const T dot = (e.array() * (m - s.array())).sum();
    const T rest = e.head(jmax).sum() + e.tail(len - jmax - 1).sum();
    const T inv = T(1) / (T(1) + rest);
    stats.min_weight = std::min(stats.min_weight, static_cast<double>(e.minCoeff() * inv));
    entropy += static_cast<double>(dot * inv + std::log1p(rest));
    s = e * inv;
    if (lo > 0) S.row(i).head(lo).setZero();
    if (hi < cols && !rows.lower_triangular) S.row(i).tail(cols - hi).setZero();
  }
  stats.mean_entropy = entropy / static_cast<double>(n);
  return stats;
}

}  // namespace

void attention_logits_fast(const Eigen::Ref<const Matrix>& X, const Eigen::Ref<const Matrix>& W_Q,
                           const Eigen::Ref<const Matrix>& W_K, double d_qk, bool lower, LogitsWorkspace& ws,
                           RowMajorMatrix& S) {
  logits_fast_impl<double>(X, W_Q, W_K, d_qk, lower, ws, S);
}
void attention_logits_fast(const Eigen::Ref<const MatrixF>& X, const Eigen::Ref<const MatrixF>& W_Q,
                           const Eigen::Ref<const MatrixF>& W_K, double d_qk, bool lower, LogitsWorkspaceT<float>& ws,
                           RowMajorMatrixT<float>& S) {
  logits_fast_impl<float>(X, W_Q, W_K, d_qk, lower, ws, S);
}
AttentionStats softmax_rows(Eigen::Ref<RowMajorMatrix> S, const MaskRows& rows, RowVector& buffer) {
  return softmax_rows_impl<double>(S, rows, buffer);
}
AttentionStats softmax_rows(Eigen::Ref<RowMajorMatrixT<float>> S, const MaskRows& rows, RowVectorT<float>& buffer) {
  return softmax_rows_impl<float>(S, rows, buffer);
}

}  // namespace rcsim
