#include "kernel/fused_attention.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>

#include "kernel/layer.hpp"
#include "kernel/threads.hpp"

namespace rcsim {

bool fused_attention_applies(const LayerParams& p, bool projection_biases, const MaskRows& rows) {
  const bool attention_dropout = p.dropout && p.dropout->attention > 0.0;
  return rows.contiguous && !p.usa && !p.hardmax && !p.random_markov && !projection_biases &&
         !p.logit_bias.active() && !p.qk_norm && !p.shape.active() && !attention_dropout && !p.keep_attention;
}

Eigen::Index fused_rows_per_block(Eigen::Index n) {
  return std::clamp<Eigen::Index>(Eigen::Index{32768} / std::max<Eigen::Index>(n, 1), 4, 64);
}

namespace {

// What one head's pass needs, computed once per call: the scaled queries, keys and values (N x d_k,
// N x d_k, N x d_v), O(N d) in all.
template <class T>
struct HeadProjections {
  MatrixT<T> Q, K, V;
};

// The row block [i0, i1) of head h: logits S = Q_b K^T over the keys the block's rows may see,
// the reference's softmax_rows on them (its statistics arithmetic, row by row), then Y_b += A_b V.
// Returns the block's statistics with the entropy summed over its rows (not averaged).
template <class T>
AttentionStats row_block(const HeadProjections<T>& p, const MaskRows& rows, Eigen::Index i0, Eigen::Index i1,
                         RowMajorMatrixT<T>& S, RowVectorT<T>& buffer, MaskRows& block_rows,
                         Eigen::Ref<MatrixT<T>> Y_block) {
  const Eigen::Index R = i1 - i0;
  int lo = rows.lo[static_cast<std::size_t>(i0)], hi = rows.hi[static_cast<std::size_t>(i0)];
  for (Eigen::Index i = i0; i < i1; ++i) {
    lo = std::min(lo, rows.lo[static_cast<std::size_t>(i)]);
    hi = std::max(hi, rows.hi[static_cast<std::size_t>(i)]);
  }
  const Eigen::Index len = hi - lo;
  block_rows.contiguous = true;
  block_rows.lower_triangular = false;  // softmax_rows zeroes every entry outside the row's range
  block_rows.lo.resize(static_cast<std::size_t>(R));
  block_rows.hi.resize(static_cast<std::size_t>(R));
  for (Eigen::Index r = 0; r < R; ++r) {
    block_rows.lo[static_cast<std::size_t>(r)] = rows.lo[static_cast<std::size_t>(i0 + r)] - lo;
    block_rows.hi[static_cast<std::size_t>(r)] = rows.hi[static_cast<std::size_t>(i0 + r)] - lo;
  }
  S.resize(R, len);
  S.noalias() = p.Q.middleRows(i0, R) * p.K.middleRows(lo, len).transpose();
  AttentionStats s = softmax_rows(S, block_rows, buffer);
  s.mean_entropy *= static_cast<double>(R);  // back to the sum over the block's rows
  Y_block.noalias() += S * p.V.middleRows(lo, len);
  return s;
}

template <class T>
AttentionStats fused_impl(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, double d_qk,
                          const MaskRows& rows, int threads, MatrixT<T>& Y) {
  const Eigen::Index n = X.rows();
  const Eigen::Index R = fused_rows_per_block(n);
  const Eigen::Index blocks = (n + R - 1) / R;
  const std::size_t H = w.q.size();
  Y.setZero(n, w.o.empty() ? w.v.front().cols() : w.o.front().cols());
  std::vector<AttentionStats> block_stats(static_cast<std::size_t>(blocks) * H);
  HeadProjections<T> proj;
  for (std::size_t h = 0; h < H; ++h) {
    proj.Q.noalias() = X * w.q[h];
    proj.Q *= static_cast<T>(1.0 / std::sqrt(d_qk));
    proj.K.noalias() = X * w.k[h];
    proj.V.noalias() = X * w.v[h];
    if (!w.o.empty()) proj.V = proj.V * w.o[h];  // model.value_dim: X W_V,h W_O,h
    std::atomic<Eigen::Index> next{0};
    std::exception_ptr error;
    std::mutex mutex;
    auto worker = [&] {
      RowMajorMatrixT<T> S;
      RowVectorT<T> buffer;
      MaskRows block_rows;
      try {
        for (Eigen::Index b; (b = next.fetch_add(1)) < blocks;) {
          const Eigen::Index i0 = b * R, i1 = std::min(n, i0 + R);
          block_stats[h * static_cast<std::size_t>(blocks) + static_cast<std::size_t>(b)] =
              row_block<T>(proj, rows, i0, i1, S, buffer, block_rows, Y.middleRows(i0, i1 - i0));
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        next.store(blocks);
      }
    };
    const int workers = static_cast<int>(std::min<Eigen::Index>(std::max(threads, 1), blocks));
    if (workers <= 1)
      worker();
    else
      run_workers(workers - 1, true, worker, [&] { next.store(blocks); }, "run.threads", threads);
    if (error) std::rethrow_exception(error);
  }
  // The statistics in a fixed order: min weight over rows and heads; entropy summed over the rows
  // of each head, averaged over rows, then over heads (as layer.cpp's reference).
  AttentionStats out;
  double entropy = 0.0;
  for (std::size_t h = 0; h < H; ++h) {
    double sum = 0.0;
    for (Eigen::Index b = 0; b < blocks; ++b) {
      const AttentionStats& s = block_stats[h * static_cast<std::size_t>(blocks) + static_cast<std::size_t>(b)];
      out.min_weight = std::min(out.min_weight, s.min_weight);
      sum += s.mean_entropy;
    }
    entropy += sum / static_cast<double>(n);
  }
  out.mean_entropy = entropy / static_cast<double>(H);
  return out;
}

}  // namespace

AttentionStats fused_attention(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, double d_qk,
                               const MaskRows& rows, int threads, Matrix& Y) {
  return fused_impl<double>(X, w, d_qk, rows, threads, Y);
}
AttentionStats fused_attention(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, double d_qk,
                               const MaskRows& rows, int threads, MatrixF& Y) {
  return fused_impl<float>(X, w, d_qk, rows, threads, Y);
}

}  // namespace rcsim
