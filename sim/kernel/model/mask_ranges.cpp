#include "kernel/model/mask_ranges.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernel/support/errors.hpp"

namespace rcsim {

void MaskRanges::add(long long a, long long b) {
  a = std::max(a, 0LL);
  b = std::min(b, static_cast<long long>(n));
  if (a >= b) return;
  if (lo.size() > start.back() && hi.back() >= a) {  // touches the row's last interval
    hi.back() = std::max(hi.back(), static_cast<int>(b));
    return;
  }
  lo.push_back(static_cast<int>(a));
  hi.push_back(static_cast<int>(b));
}

MaskRanges builtin_mask_ranges(MaskType type, int n, int w, bool transpose) {
  MaskRanges r;
  r.n = n;
  r.lo.reserve(static_cast<std::size_t>(n));
  r.hi.reserve(static_cast<std::size_t>(n));
  r.start.reserve(static_cast<std::size_t>(n) + 1);
  const long long N = n, W = w;
  for (long long i = 0; i < N; ++i) {
    switch (type) {  // row i (column i of the transpose): the allowed tokens
      case MaskType::complete: r.add(0, N); break;
      case MaskType::causal: transpose ? r.add(i, N) : r.add(0, i + 1); break;                // j <= i
      case MaskType::sliding_window: r.add(i - W, i + W + 1); break;                           // |i - j| <= w
      case MaskType::unidirectional_sliding_window: transpose ? r.add(i, i + W + 1) : r.add(i - W, i + 1); break;
      case MaskType::custom: throw std::logic_error("builtin_mask_ranges: mask.type = custom has no formula");
    }
    r.end_row();
  }
  return r;
}

MaskRanges ranges_of(const MaskMatrix& m) {
  MaskRanges r;
  r.n = static_cast<int>(m.cols());
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    for (Eigen::Index j = 0; j < m.cols();) {
      if (!m(i, j)) {
        ++j;
        continue;
      }
      const Eigen::Index a = j;
      while (j < m.cols() && m(i, j)) ++j;
      r.add(a, j);
    }
    r.end_row();
  }
  return r;
}

MaskRanges ranges_of(const MaskRows& rows) {
  if (!rows.contiguous) throw std::logic_error("ranges_of: the mask's rows are not one range each");
  MaskRanges r;
  r.n = static_cast<int>(rows.lo.size());
  for (std::size_t i = 0; i < rows.lo.size(); ++i) {
    r.add(rows.lo[i], rows.hi[i]);
    r.end_row();
  }
  return r;
}

MaskMatrix dense_mask(const MaskRanges& r) {
  MaskMatrix m = MaskMatrix::Zero(r.rows(), r.n);
  for (int i = 0; i < r.rows(); ++i)
    for (std::size_t k = r.start[static_cast<std::size_t>(i)]; k < r.start[static_cast<std::size_t>(i) + 1]; ++k)
      m.row(i).segment(r.lo[k], r.hi[k] - r.lo[k]).setOnes();
  return m;
}

MaskRows mask_rows(const MaskRanges& r) {
  // As analyse_rows: contiguous iff every row is exactly one range (and the mask square);
  // lower_triangular iff moreover each range ends at the diagonal; else both false and lo = hi = 0.
  MaskRows out;
  const int n = r.rows();
  out.contiguous = r.n == n;
  for (int i = 0; i < n && out.contiguous; ++i)
    out.contiguous = r.start[static_cast<std::size_t>(i) + 1] - r.start[static_cast<std::size_t>(i)] == 1;
  out.lo.assign(static_cast<std::size_t>(n), 0);
  out.hi.assign(static_cast<std::size_t>(n), 0);
  out.lower_triangular = out.contiguous;
  if (!out.contiguous) return out;
  for (int i = 0; i < n; ++i) {
    const std::size_t k = r.start[static_cast<std::size_t>(i)];
    out.lo[static_cast<std::size_t>(i)] = r.lo[k];
    out.hi[static_cast<std::size_t>(i)] = r.hi[k];
    if (r.hi[k] != i + 1) out.lower_triangular = false;
  }
  return out;
}

EngineMask engine_mask(const ModelSpec& c, const MaskMatrix* custom, bool dense) {
  EngineMask m;
  if (c.mask.type == MaskType::custom) {
    m.dense = make_mask(c, custom);  // checked: shape, self-loops
    m.rows = analyse_rows(m.dense);
    m.graph = analyse_mask(m.dense);
    return m;
  }
  const int n = c.model.tokens, w = c.mask.window;
  const MaskRanges rows = builtin_mask_ranges(c.mask.type, n, w);
  m.graph = analyse_mask(rows, builtin_mask_ranges(c.mask.type, n, w, true));
  m.rows = mask_rows(rows);
  if (dense) m.dense = make_mask(c);
  return m;
}

MaskRows analyse_rows(const MaskMatrix& mask) {
  MaskRows r;
  const Eigen::Index n = mask.rows();
  r.lo.assign(static_cast<std::size_t>(n), -1);  // -1: no allowed entry seen yet
  r.hi.assign(static_cast<std::size_t>(n), 0);   // one past the last allowed entry seen
  r.contiguous = mask.cols() == n;
  // Column by column (the storage order): row i's allowed entries are one range iff each new one
  // directly follows the last one seen.
  for (Eigen::Index j = 0; j < n && r.contiguous; ++j)
    for (Eigen::Index i = 0; i < n; ++i) {
      if (!mask(i, j)) continue;
      const auto ui = static_cast<std::size_t>(i);
      if (r.lo[ui] < 0)
        r.lo[ui] = static_cast<int>(j);
      else if (r.hi[ui] != j)
        r.contiguous = false;  // a second range
      r.hi[ui] = static_cast<int>(j + 1);
    }
  r.lower_triangular = r.contiguous;
  for (Eigen::Index i = 0; i < n && r.contiguous; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    if (r.lo[ui] < 0) r.contiguous = false;  // an empty row
    if (r.hi[ui] != i + 1) r.lower_triangular = false;
  }
  if (!r.contiguous) {
    r.lower_triangular = false;
    std::fill(r.lo.begin(), r.lo.end(), 0);
    std::fill(r.hi.begin(), r.hi.end(), 0);
  }
  return r;
}

}  // namespace rcsim
