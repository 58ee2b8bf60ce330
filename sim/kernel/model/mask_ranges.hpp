// Masks kept as row ranges (docs/dev/memory.md, "The mask"): per row, the allowed tokens as
// intervals of columns, O(N) for the built-in masks instead of the N x N matrix of mask.hpp. The
// graph analysis (centres, radius, connectivity) runs on them in O(N) per breadth-first search.
#pragma once

#include <cstddef>
#include <vector>

#include "kernel/model/mask.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// Row structure of a mask: `contiguous` when every row i may attend to exactly one range
// [lo[i], hi[i]) of tokens (complete, causal and both sliding windows; custom masks may not be);
// `lower_triangular` when moreover hi[i] = i + 1 for every row (causal, unidirectional window), so
// the strict upper triangle of the logits is never needed.
struct MaskRows {
  bool contiguous = false;
  bool lower_triangular = false;
  std::vector<int> lo, hi;
};
MaskRows analyse_rows(const MaskMatrix& mask);


// Row i of an n x n mask allows the tokens of the intervals [lo[k], hi[k]) for k in
// [start[i], start[i + 1]): ascending, non-empty, disjoint and not adjacent (maximal runs).
struct MaskRanges {
  int n = 0;
  std::vector<std::size_t> start{0};
  std::vector<int> lo, hi;

  // Append the interval [a, b) to the row being built (clipped to [0, n); empty ones dropped; one
  // adjacent to the row's last interval extends it), then close the row.
  void add(long long a, long long b);
  void end_row() { start.push_back(lo.size()); }
  int rows() const { return static_cast<int>(start.size()) - 1; }
};

// The row ranges of a built-in mask (mask.type not custom) of n tokens, window w: one interval per
// row (SCIENCE.md section 2). `transpose`: the ranges of its columns instead (column j: the tokens
// that attend to j), also one interval each.
MaskRanges builtin_mask_ranges(MaskType type, int n, int w, bool transpose = false);

// The maximal runs of each row of a dense mask.
MaskRanges ranges_of(const MaskMatrix& m);
// The one range per row of `rows` (rows.contiguous).
MaskRanges ranges_of(const MaskRows& rows);
// The dense N x N mask of `r`.
MaskMatrix dense_mask(const MaskRanges& r);
// The row structure the attention uses, equal to analyse_rows(dense_mask(r)).
MaskRows mask_rows(const MaskRanges& r);

// analyse_mask (mask.hpp) on ranges: the same centres, radius and searches, each search in
// O(N + intervals) with a union-find of the unvisited tokens. `columns` holds the column ranges of
// the same mask (the transpose of `rows`).
MaskGraph analyse_mask(const MaskRanges& rows, const MaskRanges& columns);

// The mask of a configuration as the engine keeps it: the row structure and the graph analysis
// always; the dense matrix (mask.type = custom, or `dense`: a platform or measure that needs it)
// or 0 x 0. Built-in masks are analysed on their ranges, never as N x N; a custom mask is
// checked as make_mask does.
struct EngineMask {
  MaskMatrix dense;
  MaskRows rows;
  MaskGraph graph;
};
EngineMask engine_mask(const ModelSpec& c, const MaskMatrix* custom, bool dense);

}  // namespace rcsim
