// The opencl platform's kernel (platform_opencl.hpp; docs/dev/platforms.md): one head's softmax
// attention on a mask whose rows are one range each, row i attending to the keys [lo_i, hi_i):
//   Y_i = sum_j a_ij v_j,  a_ij = exp(s_ij - m_i) / l_i,  s_ij = q_i . k_j,  m_i = max_j s_ij,
// with the online softmax over tiles of TILE keys (flash attention): the running maximum m, the
// running sum l = ones + below of exp(s - m), split as softmax_rows splits it (ones: the terms equal
// to 1, the maxima; below: the others, so that rest = l - 1 = below + (ones - 1) keeps its digits
// for log1p), t = sum_j exp(s_j - m) (m - s_j) for the entropy, and the weighted sum of values acc,
// all rescaled by c = exp(m_old - m_new) when a tile raises the maximum: with l = below + ones,
//   t <- c (t + l (m_new - m_old)),  below <- l c,  ones <- 0,  acc <- c acc.
// Per row it writes Y_i = acc / l, the smallest weight exp(min_j s_ij - m) / l and the entropy
// t / l + log1p(rest) (the reference's formulas, attention.hpp).
//
// One work item per row; a work-group of WG rows loads each tile of keys and values into local
// memory once, over the union [group_lo, group_hi) of its rows' ranges. Every row visits its keys
// in ascending order whatever WG and TILE are. Build options: -D DK=d_k -D DV=d -D TILE -D WG, and
// -D RCSIM_DOUBLE for float64 (cl_khr_fp64).
#ifdef RCSIM_DOUBLE
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double real;
#else
typedef float real;
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void attention_rows(
    const int n, __global const real* Q, __global const real* K, __global const real* V,
    __global const int* lo, __global const int* hi, __global const int* group_lo, __global const int* group_hi,
    __global real* Y, __global real* min_weight, __global real* entropy) {
  __local real Kt[TILE * DK];
  __local real Vt[TILE * DV];
  const int i = get_global_id(0), li = get_local_id(0), g = get_group_id(0);
  const bool row = i < n;
  real q[DK], acc[DV], s[TILE];
  for (int c = 0; c < DK; ++c) q[c] = row ? Q[(size_t)i * DK + c] : (real)0;
  for (int c = 0; c < DV; ++c) acc[c] = (real)0;
  const int a = row ? lo[i] : 0, b = row ? hi[i] : 0;
  real m = (real)0, below = (real)0, ones = (real)0, t = (real)0, smallest = (real)INFINITY;
  bool started = false;
  const int j0 = group_lo[g], j1 = group_hi[g];
  for (int base = j0; base < j1; base += TILE) {
    const int count = min(TILE, j1 - base);
    // The tile's keys and values; past the last key zeros (finite: a weight 0 times them stays 0).
    for (int e = li; e < TILE * DK; e += WG) Kt[e] = e < count * DK ? K[(size_t)base * DK + e] : (real)0;
    for (int e = li; e < TILE * DV; e += WG) Vt[e] = e < count * DV ? V[(size_t)base * DV + e] : (real)0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int from = max(a, base) - base, to = min(b, base + count) - base;  // this row's keys in the tile
    // Pass 1: the tile's logits and their maximum.
    real top = -(real)INFINITY;
    for (int jj = 0; jj < TILE; ++jj) {
      real x = q[0] * Kt[jj * DK];
      for (int c = 1; c < DK; ++c) x += q[c] * Kt[jj * DK + c];
      s[jj] = x;
      const bool in = jj >= from && jj < to;
      top = in ? max(top, x) : top;
      smallest = in ? min(smallest, x) : smallest;
    }
    // A new maximum: rescale what is summed so far (every term, those equal to 1 included).
    if (from < to && (!started || top > m)) {
      if (started) {
        const real c = exp(m - top), l = below + ones;
        t = c * (t + l * (top - m));
        below = l * c;
        for (int k = 0; k < DV; ++k) acc[k] *= c;
      }
      ones = (real)0;
      m = top;
      started = true;
    }
    // Pass 2: the weights exp(s - m) into below or ones, t and acc (branch-free: no divergence).
    for (int jj = 0; jj < TILE; ++jj) {
      const bool in = jj >= from && jj < to;
      const real x = in ? s[jj] : m;  // outside the range: weight 0, and no stale value reaches a sum
      const bool one = in && x == m;  // a maximum: its term is exactly 1
      const real e = in ? (one ? (real)1 : exp(x - m)) : (real)0;
      below += one ? (real)0 : e;
      ones += one ? (real)1 : (real)0;
      t += e * (m - x);
      for (int k = 0; k < DV; ++k) acc[k] += e * Vt[jj * DV + k];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (row) {
    const real rest = below + (ones - (real)1);  // l - 1 without rounding the 1 in (softmax_rows' rest)
    const real inv = (real)1 / ((real)1 + rest);
    for (int k = 0; k < DV; ++k) Y[(size_t)i * DV + k] = acc[k] * inv;
    min_weight[i] = exp(smallest - m) * inv;
    entropy[i] = t * inv + log1p(rest);
  }
}
