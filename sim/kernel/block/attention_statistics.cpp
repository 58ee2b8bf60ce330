#include "kernel/block/attention_statistics.hpp"

#include <algorithm>

namespace rcsim {

template <class M>
HeadRowSums head_row_sums(const M& A, const MaskRows& rows) {
  HeadRowSums s;
  const Eigen::Index n = A.rows(), cols = A.cols();
  s.columns = Vector::Zero(cols);
  for (Eigen::Index i = 0; i < n; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    const Eigen::Index lo = rows.contiguous ? rows.lo[ui] : 0, hi = rows.contiguous ? rows.hi[ui] : cols;
    const auto row = A.row(i).segment(lo, hi - lo).template cast<double>();
    s.max_weight += row.maxCoeff();
    if (lo == 0) s.sink_weight += row(0);
    s.columns.segment(lo, hi - lo) += row.transpose();
  }
  return s;
}
template HeadRowSums head_row_sums(const Matrix&, const MaskRows&);
template HeadRowSums head_row_sums(const MatrixF&, const MaskRows&);
template HeadRowSums head_row_sums(const RowMajorMatrix&, const MaskRows&);
template HeadRowSums head_row_sums(const RowMajorMatrixT<float>&, const MaskRows&);

void add_head_statistics(AttentionStats& out, const HeadRowSums& head, Eigen::Index n) {
  const double rows = static_cast<double>(n);
  out.mean_max_weight += head.max_weight / rows;
  const double sink = head.sink_weight / rows;
  out.mean_sink_weight += sink;
  if (sink > kSinkThreshold) out.sink_rate += 1.0;
  if (out.received.size() == 0) out.received = Vector::Zero(head.columns.size());
  out.received += head.columns;
}

void finish_head_statistics(AttentionStats& out, std::size_t H) {
  const double heads = static_cast<double>(H);
  out.mean_max_weight /= heads;
  out.mean_sink_weight /= heads;
  out.sink_rate /= heads;
  out.received /= heads;
}

}  // namespace rcsim
