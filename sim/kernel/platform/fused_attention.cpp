#include "kernel/platform/fused_attention.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>

#include "kernel/block/attention_statistics.hpp"
#include "kernel/support/threads.hpp"

namespace rcsim {

Eigen::Index fused_rows_per_block(Eigen::Index n) {
  return std::clamp<Eigen::Index>(Eigen::Index{32768} / std::max<Eigen::Index>(n, 1), 4, 64);
}

namespace {

// What one head's pass needs, computed once per call: the keys and values (N x d_k, N x d_v) and,
// up to kRowwiseKeyDim, the scaled queries; above it each row block computes its own queries from
// X and W_Q (one N x d_k matrix less at long context). O(N d) in all.
template <class T>
struct HeadProjections {
  MatrixT<T> Q, K, V;
  RowMajorMatrixT<T> KT, VT;  // K^T and V^T with rows contiguous: row by row for small d_k, d_v
  const Eigen::Ref<const MatrixT<T>>* X = nullptr;
  const MatrixT<T>* W_Q = nullptr;
  T q_scale = T(1);
};

// Up to this d_k (d_v) the logits (values) of a row are d_k (d_v) vectorised passes over K^T's
// (V^T's) rows; above it one matrix product per block (Eigen's GEMM, whose packing costs more than
// it gains at small dimensions).
constexpr Eigen::Index kRowwiseKeyDim = 8;

// exp_nonpositive's body, inline so that the loops that call it vectorise.
inline double exp_nonpositive_inline(double x) {
  const double log2e = 1.4426950408889634, ln2_hi = 0.6931471805598903, ln2_lo = 5.497923018708371e-14;
  const double shifter = 6755399441055744.0;  // 1.5 * 2^52: x log2(e) + shifter is rounded to an integer k
  const double t = x * log2e + shifter;
  const double k = t - shifter;
  const double r = (x - k * ln2_hi) - k * ln2_lo;
  double p = 1.0 / 6227020800.0;  // 1/13!, then Horner's scheme down to 1/0! (written out: the loop over j vectorises)
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  std::uint64_t bits;
  std::memcpy(&bits, &t, sizeof bits);  // the low bits of t hold k (two's complement, modulo 2^52)
  const std::uint64_t scale_bits = (bits + 1023) << 52;  // 2^k: the biased exponent k + 1023 in [1, 1023]
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  return p * scale;
}

// e_j = exp(s_j - m) for s_j <= m.
void exp_shifted(const double* s, double m, double* e, Eigen::Index n) {
  for (Eigen::Index j = 0; j < n; ++j) e[j] = exp_nonpositive_inline(s[j] - m);
}
void exp_shifted(const float* s, float m, float* e, Eigen::Index n) {  // float: Eigen's polynomial exp
  using Row = Eigen::Array<float, 1, Eigen::Dynamic>;
  Eigen::Map<Row>(e, n) = (Eigen::Map<const Row>(s, n) - m).exp();
}

// One row's softmax, unnormalised: e_j = exp(s_j - m) into `buffer` (the caller divides the row's
// product by l = sum_j exp(s_j - m)). The statistics by the reference's formulas (attention.cpp,
// softmax_rows): l = 1 + rest with rest summed without one maximum, the entropy
// sum_j a_j (m - s_j) + log1p(rest), the smallest weight exp(min_j s_j - m) / l.
template <class T>
struct RowSoftmax {
  T inverse_sum;
  double min_weight, entropy;
};

template <class T>
RowSoftmax<T> softmax_row(const T* s, Eigen::Index len, T* buffer) {
  using Row = Eigen::Array<T, 1, Eigen::Dynamic>;
  Eigen::Map<const Row> row(s, len);
  Eigen::Map<Row> e(buffer, len);
  const T m = row.maxCoeff(), smallest = row.minCoeff();
  exp_shifted(s, m, buffer, len);
  const T limit = std::is_same<T, float>::value ? T(86) : T(708);  // below: std::exp (subnormal or 0)
  if (m - smallest > limit)
    for (Eigen::Index j = 0; j < len; ++j)
      if (m - s[j] > limit) buffer[j] = std::exp(s[j] - m);
  const T dot = (e * (m - row)).sum();
  // rest = the sum without one maximum (whose term is exactly 1): the terms below 1, and the other
  // terms equal to 1 (ties), summed apart from the 1 so that log1p(rest) keeps its digits. With
  // every term in [0, 1], floor(e_j) is 1 for the terms equal to 1 and 0 for the others (vectorised).
  const T ones = e.floor().sum();
  const T rest = (e - e.floor()).sum() + (ones - T(1));
  const T inv = T(1) / (T(1) + rest);
  return {inv, static_cast<double>(std::exp(smallest - m) * inv), static_cast<double>(dot * inv + std::log1p(rest))};
}

// Work matrices of one thread.
template <class T>
struct BlockWork {
  RowMajorMatrixT<T> S, P;  // the block's logits and its unnormalised weights (0 outside the rows' ranges)
  VectorT<T> inverse_sums;
  MatrixT<T> Yh, Q;  // Q: the block's scaled queries (d_k > kRowwiseKeyDim)
};

// A row block's statistics, summed over its rows (the smallest weight: the minimum): the entropy
// always, the largest and the sink weights (attention_statistics.hpp) when asked.
struct BlockStats {
  double min_weight = 1.0, entropy = 0.0, max_weight = 0.0, sink_weight = 0.0;
};

// The row block [i0, i1) of one head: logits S = Q_b K^T over the keys the block's rows may see,
// each row's softmax (unnormalised) on its range into P, 0 elsewhere, then Y_b += diag(1/l) P V.
// With `columns` (the attention statistics) also the block's column sums diag(1/l) P added to it.
template <class T>
BlockStats row_block(const HeadProjections<T>& p, const MaskRows& rows, Eigen::Index i0, Eigen::Index i1,
                     BlockWork<T>& w, Eigen::Ref<MatrixT<T>> Y_block, Vector* columns) {
  const Eigen::Index R = i1 - i0, dk = p.K.cols();
  int lo = rows.lo[static_cast<std::size_t>(i0)], hi = rows.hi[static_cast<std::size_t>(i0)];
  for (Eigen::Index i = i0; i < i1; ++i) {
    lo = std::min(lo, rows.lo[static_cast<std::size_t>(i)]);
    hi = std::max(hi, rows.hi[static_cast<std::size_t>(i)]);
  }
  const Eigen::Index len = hi - lo;
  w.S.resize(R, len);
  w.P.resize(R, len);
  if (dk > kRowwiseKeyDim) {
    w.Q.noalias() = p.X->middleRows(i0, R) * *p.W_Q;
    w.Q *= p.q_scale;
    w.S.noalias() = w.Q * p.K.middleRows(lo, len).transpose();
  }
  w.inverse_sums.resize(R);
  BlockStats stats;
  for (Eigen::Index r = 0; r < R; ++r) {
    const auto ui = static_cast<std::size_t>(i0 + r);
    const Eigen::Index a = rows.lo[ui] - lo, b = rows.hi[ui] - lo;
    auto s = w.S.row(r).segment(a, b - a);
    if (dk <= kRowwiseKeyDim) {
      s = p.Q(i0 + r, 0) * p.KT.row(0).segment(lo + a, b - a);
      for (Eigen::Index k = 1; k < dk; ++k) s += p.Q(i0 + r, k) * p.KT.row(k).segment(lo + a, b - a);
    }
    const RowSoftmax<T> sm = softmax_row<T>(s.data(), b - a, w.P.row(r).data() + a);
    if (a > 0) w.P.row(r).head(a).setZero();  // masked: exactly 0
    if (b < len) w.P.row(r).tail(len - b).setZero();
    w.inverse_sums(r) = sm.inverse_sum;
    stats.min_weight = std::min(stats.min_weight, sm.min_weight);
    stats.entropy += sm.entropy;
    if (columns) {  // the largest term is exactly 1: the largest weight is 1/l; token 1 is column 0 when lo = 0
      stats.max_weight += static_cast<double>(sm.inverse_sum);
      if (lo == 0) stats.sink_weight += static_cast<double>(w.P(r, 0) * sm.inverse_sum);
    }
  }
  if (columns)
    columns->segment(lo, len) += (w.inverse_sums.transpose() * w.P).transpose().template cast<double>();
  const Eigen::Index dv = p.V.cols();
  if (dv > kRowwiseKeyDim) {
    w.Yh.noalias() = w.P * p.V.middleRows(lo, len);
  } else {
    w.Yh.resize(R, dv);
    for (Eigen::Index r = 0; r < R; ++r)
      for (Eigen::Index k = 0; k < dv; ++k) w.Yh(r, k) = w.P.row(r).dot(p.VT.row(k).segment(lo, len));
  }
  Y_block += w.inverse_sums.asDiagonal() * w.Yh;
  return stats;
}

// Head h's projections (HeadProjections).
template <class T>
void project_head(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, std::size_t h, double d_qk,
                  HeadProjections<T>& proj) {
  proj.X = &X;
  proj.W_Q = &w.q[h];
  proj.q_scale = static_cast<T>(1.0 / std::sqrt(d_qk));
  proj.K.noalias() = X * w.k[h];
  if (proj.K.cols() <= kRowwiseKeyDim) {
    proj.KT = proj.K.transpose();
    proj.Q.noalias() = X * w.q[h];
    proj.Q *= proj.q_scale;
  }
  proj.V.noalias() = X * w.v[h];
  if (!w.o.empty()) proj.V = proj.V * w.o[h];  // model.value_dim: X W_V,h W_O,h
  if (proj.V.cols() <= kRowwiseKeyDim) proj.VT = proj.V.transpose();
}

// The statistics' work units: with the column sums, kColumnGroups runs of consecutive row blocks,
// each summing its columns into its own vector (memory kColumnGroups x N), added in group order;
// without, every block is a unit. Neither depends on the thread count.
constexpr Eigen::Index kColumnGroups = 16;

template <class T>
AttentionStats fused_impl(const Eigen::Ref<const MatrixT<T>>& X, const LayerWeightsT<T>& w, double d_qk,
                          const MaskRows& rows, int threads, bool statistics, MatrixT<T>& Y) {
  const Eigen::Index n = X.rows();
  const Eigen::Index R = fused_rows_per_block(n);
  const Eigen::Index blocks = (n + R - 1) / R;
  const Eigen::Index units = statistics ? std::min(blocks, kColumnGroups) : blocks;
  const std::size_t H = w.q.size();
  Y.setZero(n, w.o.empty() ? w.v.front().cols() : w.o.front().cols());
  std::vector<BlockStats> block_stats(static_cast<std::size_t>(blocks) * H);
  std::vector<Vector> group_columns(statistics ? static_cast<std::size_t>(units) : 0);
  AttentionStats out;
  HeadProjections<T> proj;
  for (std::size_t h = 0; h < H; ++h) {
    project_head<T>(X, w, h, d_qk, proj);
    for (Vector& c : group_columns) c.setZero(n);
    std::atomic<Eigen::Index> next{0};
    std::exception_ptr error;
    std::mutex mutex;
    auto worker = [&] {
      BlockWork<T> work;
      try {
        for (Eigen::Index u; (u = next.fetch_add(1)) < units;) {
          Vector* columns = statistics ? &group_columns[static_cast<std::size_t>(u)] : nullptr;
          for (Eigen::Index b = u * blocks / units; b < (u + 1) * blocks / units; ++b) {
            const Eigen::Index i0 = b * R, i1 = std::min(n, i0 + R);
            block_stats[h * static_cast<std::size_t>(blocks) + static_cast<std::size_t>(b)] =
                row_block<T>(proj, rows, i0, i1, work, Y.middleRows(i0, i1 - i0), columns);
          }
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        next.store(units);
      }
    };
    const int workers = static_cast<int>(std::min<Eigen::Index>(std::max(threads, 1), units));
    if (workers <= 1)
      worker();
    else
      run_workers(workers - 1, true, worker, [&] { next.store(units); }, "run.threads", threads);
    if (error) std::rethrow_exception(error);
    if (statistics) {  // this head's sums over its blocks and groups, in order
      HeadRowSums sums;
      sums.columns = Vector::Zero(n);
      for (const Vector& c : group_columns) sums.columns += c;
      for (Eigen::Index b = 0; b < blocks; ++b) {
        const BlockStats& s = block_stats[h * static_cast<std::size_t>(blocks) + static_cast<std::size_t>(b)];
        sums.max_weight += s.max_weight;
        sums.sink_weight += s.sink_weight;
      }
      add_head_statistics(out, sums, n);
    }
  }
  // The statistics in a fixed order: min weight over rows and heads; entropy summed over the rows
  // of each head, averaged over rows, then over heads (as layer.cpp's reference).
  double entropy = 0.0;
  for (std::size_t h = 0; h < H; ++h) {
    double sum = 0.0;
    for (Eigen::Index b = 0; b < blocks; ++b) {
      const BlockStats& s = block_stats[h * static_cast<std::size_t>(blocks) + static_cast<std::size_t>(b)];
      out.min_weight = std::min(out.min_weight, s.min_weight);
      sum += s.entropy;
    }
    entropy += sum / static_cast<double>(n);
  }
  out.mean_entropy = entropy / static_cast<double>(H);
  if (statistics) finish_head_statistics(out, H);
  return out;
}

}  // namespace

double exp_nonpositive(double x) { return exp_nonpositive_inline(x); }

AttentionStats fused_attention(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, double d_qk,
                               const MaskRows& rows, int threads, bool statistics, Matrix& Y) {
  return fused_impl<double>(X, w, d_qk, rows, threads, statistics, Y);
}
AttentionStats fused_attention(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, double d_qk,
                               const MaskRows& rows, int threads, bool statistics, MatrixF& Y) {
  return fused_impl<float>(X, w, d_qk, rows, threads, statistics, Y);
}

const AttentionKernel& cpu_attention_kernel() {
  static const AttentionKernel kernel{"cpu", fused_attention, fused_attention, true};
  return kernel;
}

}  // namespace rcsim
