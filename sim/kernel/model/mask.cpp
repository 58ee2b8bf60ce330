#include "kernel/model/mask.hpp"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "kernel/support/errors.hpp"

namespace rcsim {

namespace {
template <class Allowed>
MaskMatrix build(int n, Allowed allowed) {
  MaskMatrix m(n, n);
  for (int j = 0; j < n; ++j)  // column by column: the storage order (N^2 bytes at N = 10^4 in 0.1 s)
    for (int i = 0; i < n; ++i) m(i, j) = allowed(i, j) ? 1 : 0;
  return m;
}
// ceil(a / b) for a >= 0, b >= 1, without forming a + b - 1 (which overflows for a window
// near INT_MAX).
int ceil_div(int a, int b) { return a / b + (a % b != 0 ? 1 : 0); }
}  // namespace

MaskMatrix complete_mask(int n) {
  return build(n, [](int, int) { return true; });
}
MaskMatrix causal_mask(int n) {
  return build(n, [](int i, int j) { return j <= i; });
}
MaskMatrix sliding_window_mask(int n, int w) {
  return build(n, [w](int i, int j) { return std::abs(i - j) <= w; });
}
MaskMatrix unidirectional_sliding_window_mask(int n, int w) {
  return build(n, [w](int i, int j) { return j <= i && i - j <= w; });
}

void check_mask(const MaskMatrix& m, const std::string& what) {
  if (m.rows() != m.cols())
    throw UsageError(what + ": mask must be square, got [" + std::to_string(m.rows()) + ", " +
                     std::to_string(m.cols()) + "]");
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    if (!m(i, i))
      throw UsageError(what + ": token " + std::to_string(i) +
                       " does not attend to itself; every token needs a self-loop (mask[i][i] != 0)");
}

MaskMatrix make_mask(const ModelSpec& c, const MaskMatrix* custom) {
  const int n = c.model.tokens, w = c.mask.window;
  switch (c.mask.type) {
    case MaskType::complete: return complete_mask(n);
    case MaskType::causal: return causal_mask(n);
    case MaskType::sliding_window: return sliding_window_mask(n, w);
    case MaskType::unidirectional_sliding_window: return unidirectional_sliding_window_mask(n, w);
    case MaskType::custom: {
      if (!custom) throw UsageError("mask.type = custom needs the adjacency matrix of mask.file");
      if (custom->rows() != n || custom->cols() != n)
        throw UsageError("mask.file '" + c.mask.file + "': the mask is " + std::to_string(custom->rows()) + " x " +
                         std::to_string(custom->cols()) + ", expected " + std::to_string(n) + " x " + std::to_string(n) +
                         " (model.tokens)");
      check_mask(*custom, "mask.file '" + c.mask.file + "' dataset /mask");
      return *custom;
    }
  }
  throw UsageError("unknown mask type");
}

int radius_formula(MaskType type, int n, int w) {
  // The table of SCIENCE.md section 2 (a single token has radius 0: nothing to reach).
  if (n == 1) return 0;
  switch (type) {
    case MaskType::complete:
    case MaskType::causal: return 1;
    case MaskType::sliding_window: return ceil_div(ceil_div(n - 1, 2), w);
    case MaskType::unidirectional_sliding_window: return ceil_div(n - 1, w);
    case MaskType::custom: return -1;
  }
  return -1;
}

}  // namespace rcsim
