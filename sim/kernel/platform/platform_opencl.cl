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
// memory once (transposed: a component of VW consecutive keys is one vector load), over the union
// [group_lo, group_hi) of its rows' ranges. A row's keys are summed in VW lanes (key j in lane
// j mod VW, each lane in ascending order), the lanes added at the end: the result depends on VW
// but not on WG, TILE or the device's scheduling. VW = 8 on CPU devices (pocl vectorises across
// keys; one lane per key is 7x slower there), 1 on GPUs. Build options: -D DK=d_k -D DV=d -D TILE
// (a multiple of VW) -D WG -D VW (1 or 8), -D WGS (attention_split's work-group, a power of 2)
// and -D RCSIM_DOUBLE for float64 (cl_khr_fp64).
//
// Batches: the second index of the range (get_global_id(1)) is the problem p, one (call, head) of
// a batch of trials; its Q and K are rows [p n, (p + 1) n) of n x DK arrays, V and Y of n x DV
// arrays, min_weight and entropy entries [p n, (p + 1) n). Every problem shares the row ranges.
#ifdef RCSIM_DOUBLE
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double real;
typedef double2 real2;
typedef double4 real4;
typedef double8 real8;
typedef long8 mask8;
#else
typedef float real;
typedef float2 real2;
typedef float4 real4;
typedef float8 real8;
typedef int8 mask8;
#endif

// VW lanes: keys in groups of VW (vector types: SIMD on a CPU device); VW = 1 scalar (GPUs).
#if VW == 1
typedef real realv;
typedef int maskv;
#define VLOAD(p) (*(p))
#define LANES(j) (j)
#define SEL(mask, a, b) ((mask) ? (a) : (b))
#define HSUM(v) (v)
#define HMAX(v) (v)
#define HMIN(v) (v)
#elif VW == 8
typedef real8 realv;
typedef mask8 maskv;
#define VLOAD(p) vload8(0, p)
#define LANES(j) ((maskv)(0, 1, 2, 3, 4, 5, 6, 7) + (j))
#define SEL(mask, a, b) select((b), (a), (mask))
#define HSUM(v) hsum8(v)
#define HMAX(v) hmax8(v)
#define HMIN(v) hmin8(v)
inline real hsum8(real8 v) { const real4 a = v.lo + v.hi; const real2 b = a.lo + a.hi; return b.x + b.y; }
inline real hmax8(real8 v) { const real4 a = max(v.lo, v.hi); const real2 b = max(a.lo, a.hi); return max(b.x, b.y); }
inline real hmin8(real8 v) { const real4 a = min(v.lo, v.hi); const real2 b = min(a.lo, a.hi); return min(b.x, b.y); }
#else
#error "VW must be 1 or 8"
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void attention_rows(
    const int n, __global const real* Q, __global const real* K, __global const real* V,
    __global const int* lo, __global const int* hi, __global const int* group_lo, __global const int* group_hi,
    __global real* Y, __global real* min_weight, __global real* entropy) {
  __local real Kt[DK * TILE];  // transposed: Kt[c * TILE + jj] is component c of the tile's key jj
  __local real Vt[DV * TILE];
  const int i = get_global_id(0), li = get_local_id(0), g = get_group_id(0);
  const size_t p = get_global_id(1);  // the problem: (call, head) of the batch
  Q += p * n * DK;
  K += p * n * DK;
  V += p * n * DV;
  Y += p * n * DV;
  min_weight += p * n;
  entropy += p * n;
  const bool row = i < n;
  real q[DK];
  realv acc[DV], s[TILE / VW];
  for (int c = 0; c < DK; ++c) q[c] = row ? Q[(size_t)i * DK + c] : (real)0;
  for (int c = 0; c < DV; ++c) acc[c] = (realv)0;
  const int a = row ? lo[i] : 0, b = row ? hi[i] : 0;
  real m = (real)0, smallest = (real)INFINITY;
  realv below = (realv)0, ones = (realv)0, t = (realv)0;
  bool started = false;
  const int j0 = group_lo[g], j1 = group_hi[g];
  for (int base = j0; base < j1; base += TILE) {
    const int count = min(TILE, j1 - base);
    // The tile's keys and values; past the last key zeros (finite: a weight 0 times them stays 0).
    for (int e = li; e < TILE * DK; e += WG) Kt[(e % DK) * TILE + e / DK] = e < count * DK ? K[(size_t)base * DK + e] : (real)0;
    for (int e = li; e < TILE * DV; e += WG) Vt[(e % DV) * TILE + e / DV] = e < count * DV ? V[(size_t)base * DV + e] : (real)0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int from = max(a, base) - base, to = min(b, base + count) - base;  // this row's keys in the tile
    // Pass 1: the tile's logits and their maximum.
    real top = -(real)INFINITY;
    for (int jb = 0; jb < TILE; jb += VW) {
      realv x = q[0] * VLOAD(Kt + jb);
      for (int c = 1; c < DK; ++c) x += q[c] * VLOAD(Kt + c * TILE + jb);
      s[jb / VW] = x;
      const maskv in = LANES(jb) >= from && LANES(jb) < to;
      top = max(top, HMAX(SEL(in, x, -(real)INFINITY)));
      smallest = min(smallest, HMIN(SEL(in, x, (real)INFINITY)));
    }
    // A new maximum: rescale what is summed so far (every term, those equal to 1 included).
    if (from < to && (!started || top > m)) {
      if (started) {
        const real c = exp(m - top);
        const realv l = below + ones;
        t = c * (t + l * (top - m));
        below = l * c;
        for (int k = 0; k < DV; ++k) acc[k] *= c;
      }
      ones = (realv)0;
      m = top;
      started = true;
    }
    // Pass 2: the weights exp(s - m) into below or ones, t and acc (branch-free: no divergence).
    for (int jb = 0; jb < TILE; jb += VW) {
      const maskv in = LANES(jb) >= from && LANES(jb) < to;
      const realv x = SEL(in, s[jb / VW], (realv)m);  // outside the range: weight 0
      const maskv one = in && x == m;  // a maximum: its term is exactly 1
      const realv e = SEL(in, SEL(one, (realv)1, exp(x - m)), (realv)0);
      below += SEL(one, (realv)0, e);
      ones += SEL(one, (realv)1, (realv)0);
      t += e * (m - x);
      for (int k = 0; k < DV; ++k) acc[k] += e * VLOAD(Vt + k * TILE + jb);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (row) {
    const real rest = HSUM(below) + (HSUM(ones) - (real)1);  // l - 1 without rounding the 1 in (softmax_rows' rest)
    const real inv = (real)1 / ((real)1 + rest);
    for (int k = 0; k < DV; ++k) Y[(size_t)i * DV + k] = HSUM(acc[k]) * inv;
    min_weight[i] = exp(smallest - m) * inv;
    entropy[i] = HSUM(t) * inv + log1p(rest);
  }
}

// attention_split: the same rows with one work-group of WGS items per row (the GPU layout: n
// work-groups per problem instead of n / WG). Item li takes the keys lo_i + li, lo_i + li + WGS, ...
// of the row, in ascending order, keeping its own online-softmax partial (m, below, ones, t, acc,
// smallest) as attention_rows keeps its lanes; the partials are then merged in local memory by a
// tree of fixed shape (at stride h = WGS / 2, ..., 1, item li < h merges item li + h's into its
// own), each side first rescaled to the larger maximum M as above (c = exp(m - M); a side whose
// maximum is M keeps its ones). The result depends on WGS but not on the device's scheduling.
__kernel __attribute__((reqd_work_group_size(WGS, 1, 1))) void attention_split(
    const int n, __global const real* Q, __global const real* K, __global const real* V,
    __global const int* lo, __global const int* hi, __global real* Y, __global real* min_weight,
    __global real* entropy) {
  __local real lm[WGS], lbelow[WGS], lones[WGS], lt[WGS], lsmall[WGS];
  __local real lacc[WGS * DV];
  const int i = get_group_id(0), li = get_local_id(0);
  const size_t p = get_global_id(1);
  Q += p * n * DK;
  K += p * n * DK;
  V += p * n * DV;
  real q[DK], acc[DV];
  for (int c = 0; c < DK; ++c) q[c] = Q[(size_t)i * DK + c];
  for (int k = 0; k < DV; ++k) acc[k] = (real)0;
  real m = (real)0, below = (real)0, ones = (real)0, t = (real)0, smallest = (real)INFINITY;
  const int b = hi[i];
  for (int j = lo[i] + li; j < b; j += WGS) {
    real s = q[0] * K[(size_t)j * DK];
    for (int c = 1; c < DK; ++c) s += q[c] * K[(size_t)j * DK + c];
    smallest = min(smallest, s);
    if (ones == (real)0 || s > m) {  // the item's first key, or a new maximum: rescale
      if (ones > (real)0) {
        const real c = exp(m - s), l = below + ones;
        t = c * (t + l * (s - m));
        below = l * c;
        for (int k = 0; k < DV; ++k) acc[k] *= c;
      }
      ones = (real)0;
      m = s;
    }
    const real e = s == m ? (real)1 : exp(s - m);
    if (s == m) ones += (real)1; else below += e;
    t += e * (m - s);
    for (int k = 0; k < DV; ++k) acc[k] += e * V[(size_t)j * DV + k];
  }
  lm[li] = m; lbelow[li] = below; lones[li] = ones; lt[li] = t; lsmall[li] = smallest;
  for (int k = 0; k < DV; ++k) lacc[li * DV + k] = acc[k];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int h = WGS / 2; h > 0; h /= 2) {
    const int o = li + h;
    if (li < h && lones[o] > (real)0) {  // the partner has keys (a started partial has ones >= 1)
      real m2 = lm[o], below2 = lbelow[o], ones2 = lones[o], t2 = lt[o], c1 = (real)1, c2 = (real)1;
      smallest = min(smallest, lsmall[o]);
      if (ones == (real)0) {  // this item has none: the partner's partial as it is
        m = m2;
        c1 = (real)0;
      } else {
        const real M = max(m, m2);
        if (m < M) {
          c1 = exp(m - M);
          const real l = below + ones;
          t = c1 * (t + l * (M - m));
          below = l * c1;
          ones = (real)0;
        }
        if (m2 < M) {
          c2 = exp(m2 - M);
          const real l2 = below2 + ones2;
          t2 = c2 * (t2 + l2 * (M - m2));
          below2 = l2 * c2;
          ones2 = (real)0;
        }
        m = M;
      }
      below += below2;
      ones += ones2;
      t += t2;
      for (int k = 0; k < DV; ++k) acc[k] = acc[k] * c1 + lacc[o * DV + k] * c2;
      lm[li] = m; lbelow[li] = below; lones[li] = ones; lt[li] = t; lsmall[li] = smallest;
      for (int k = 0; k < DV; ++k) lacc[li * DV + k] = acc[k];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (li == 0) {
    const real rest = below + (ones - (real)1);
    const real inv = (real)1 / ((real)1 + rest);
    const size_t row = p * n + i;
    for (int k = 0; k < DV; ++k) Y[row * DV + k] = acc[k] * inv;
    min_weight[row] = exp(smallest - m) * inv;
    entropy[row] = t * inv + log1p(rest);
  }
}
