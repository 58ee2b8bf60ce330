// The CPU platform's attention (run.platform = cpu; docs/dev/platforms.md): softmax attention
// without the N x N matrix, in the style of flash attention. For every row i and head h,
//   Y_i += sum_{j in [lo_i, hi_i)} softmax_j(q_i . k_j) v_j,
//   q_i = x_i W_Q,h / sqrt(d_QK),  k_j = x_j W_K,h,  v_j = x_j W_V,h (W_O,h with model.value_dim),
// computed over blocks of rows and of keys with the online softmax: a running maximum m_i, the
// running sum l_i = sum_j exp(s_ij - m_i) and the running weighted sum of values, all rescaled by
// exp(m_old - m_new) when the maximum grows. Memory O((N + block^2) d) per thread.
//
// The attention statistics are the reference's (attention.hpp): the smallest weight over the
// allowed entries, exp(min_j s_ij - m_i) / l_i, and the mean row entropy
// log l_i + t_i / l_i with t_i = sum_j exp(s_ij - m_i) (m_i - s_ij) (rescaled like l_i), each
// averaged (entropy) or minimised (weight) over rows, then over heads as the reference does.
//
// Rows are shared among threads in blocks; each row is computed by one thread, always in the same
// order of key blocks, and the per-row statistics are reduced in row order afterwards: the result
// is bitwise independent of the thread count. It agrees with the reference platform (layer.cpp) to
// rounding: tests/test_platform_conformance.cpp, the conformance body of every platform entry.
#pragma once

#include "kernel/ops/attention.hpp"
#include "kernel/block/attention_kernel.hpp"
#include "kernel/support/types.hpp"
#include "kernel/model/weights.hpp"

namespace rcsim {

// The cpu platform's entry of the seam (attention_kernel.hpp): fused_attention below.
const AttentionKernel& cpu_attention_kernel();

// Rows per block for N tokens: the block's logits (rows x keys) near 256 KiB, 4 to 64 rows. A
// function of N alone, so that neither the blocks nor the reduction depend on the thread count.
Eigen::Index fused_rows_per_block(Eigen::Index n);

// exp(x) for x in [-708, 0], the cpu platform's exponential (double): x = k ln 2 + r with
// |r| <= ln(2)/2, exp(r) by its Taylor polynomial of degree 13 (truncation below 2e-16 relative),
// 2^k from the exponent bits; within 4.5e-16 relative of std::exp there. A loop of it vectorises
// (Eigen's double exp divides and is about twice as slow). Below -708 the caller uses std::exp.
double exp_nonpositive(double x);

// Y = sum_h A_h V_h (Y resized to N x d and overwritten), on `threads` threads (>= 1; a thread the
// system refuses is one error naming run.threads). Returns the attention statistics; with
// `statistics` also those of attention_statistics.hpp, in the same pass: per row the largest
// weight 1/l_i and the sink weight exp(s_i1 - m_i) / l_i, per key the column sums, summed per run of
// row blocks (16 runs, fixed by N) and the runs added in order: still bitwise independent of
// the thread count, in O(16 N) more memory.
AttentionStats fused_attention(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, double d_qk,
                               const MaskRows& rows, int threads, bool statistics, Matrix& Y);
AttentionStats fused_attention(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, double d_qk,
                               const MaskRows& rows, int threads, bool statistics,
                               MatrixF& Y);  // run.precision = float32

}  // namespace rcsim
