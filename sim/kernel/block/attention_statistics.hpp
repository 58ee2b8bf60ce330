// The attention statistics of SCIENCE.md section 8, per layer (docs/science/attention-statistics.md):
// for each head h and row i of A_h, the largest weight max_j A_ij and the sink weight A_i1 (the
// weight on the first token); for each key j the column sum c_j = sum_i A_ij (attention received).
// A layer reports them averaged over the rows and then over the heads, beside the sink rate (the
// fraction of heads whose mean sink weight exceeds kSinkThreshold) and the column sums averaged
// over heads. Every platform computes them in its own pass: the reference from its N x N weights
// (head_row_sums below), the cpu platform row by row without the matrix (fused_attention.cpp);
// both combine the heads with add_head_statistics and finish_head_statistics, in head order.
// Computed when LayerParams::attention_statistics (an output.measures of MeasurePass::attention_rows).
#pragma once

#include <cstddef>

#include "kernel/ops/attention.hpp"  // AttentionStats, MaskRows
#include "kernel/support/types.hpp"

namespace rcsim {

// The sink threshold eps of Gu et al. 2024 ("When attention sink emerges", section 3: a head is a
// sink head when the mean over rows of its weight on the first token exceeds eps = 0.3).
inline constexpr double kSinkThreshold = 0.3;

// One head's sums over its rows: sum_i max_j A_ij, sum_i A_i1 and the column sums c_j (double).
struct HeadRowSums {
  double max_weight = 0.0;
  double sink_weight = 0.0;
  Vector columns;
};

// The sums of one head's weights A (rows x N). Row i's entries are those of its range
// [rows.lo_i, rows.hi_i) when rows.contiguous (the others are not read: the fast path leaves the
// strict upper triangle unspecified), else the whole row (the general path's masked entries are
// exactly 0). The first token is column 0.
// M: Matrix, MatrixF, RowMajorMatrix or RowMajorMatrixT<float> (instantiated in the .cpp).
template <class M>
HeadRowSums head_row_sums(const M& A, const MaskRows& rows);

// Adds one head of n rows to `out`: its mean largest weight and mean sink weight, one sink head
// if that mean exceeds kSinkThreshold, its column sums.
void add_head_statistics(AttentionStats& out, const HeadRowSums& head, Eigen::Index n);
// After the H heads: the means over heads (sink_rate the fraction of sink heads).
void finish_head_statistics(AttentionStats& out, std::size_t H);

}  // namespace rcsim
