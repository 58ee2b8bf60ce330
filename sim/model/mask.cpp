#include "model/mask.hpp"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <limits>

#include "core/errors.hpp"
#include "hdf5/hdf5_file.hpp"

namespace rcsim {

namespace {
template <class Allowed>
MaskMatrix build(int n, Allowed allowed) {
  MaskMatrix m(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) m(i, j) = allowed(i, j) ? 1 : 0;
  return m;
}
int ceil_div(int a, int b) { return (a + b - 1) / b; }
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
  return build(n, [w](int i, int j) { return j <= i && i - w <= j; });
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

MaskMatrix make_mask(const Config& c) {
  const int n = c.model.tokens, w = c.mask.window;
  switch (c.mask.type) {
    case MaskType::complete: return complete_mask(n);
    case MaskType::causal: return causal_mask(n);
    case MaskType::sliding_window: return sliding_window_mask(n, w);
    case MaskType::unidirectional_sliding_window: return unidirectional_sliding_window_mask(n, w);
    case MaskType::custom: {
      const std::string what = "mask.file '" + c.mask.file + "' dataset /mask";
      const h5::File file = h5::File::open_read(c.mask.file, "mask.file");
      const RowMajorMatrix a = file.read_matrix("mask", {n, n});
      MaskMatrix m = (a.array() != 0.0).cast<std::uint8_t>();
      check_mask(m, what);
      return m;
    }
  }
  throw UsageError("unknown mask type");
}

MaskGraph analyse_mask(const MaskMatrix& m) {
  const int n = static_cast<int>(m.rows());
  MaskGraph g;
  int best = std::numeric_limits<int>::max();
  std::vector<int> dist(static_cast<std::size_t>(n));
  std::deque<int> queue;
  for (int c = 0; c < n; ++c) {
    std::fill(dist.begin(), dist.end(), -1);
    dist[static_cast<std::size_t>(c)] = 0;
    queue.assign(1, c);
    int reached = 1, far = 0;
    while (!queue.empty()) {
      const int j = queue.front();
      queue.pop_front();
      for (int i = 0; i < n; ++i) {  // edge j -> i iff token i attends to token j
        if (m(i, j) && dist[static_cast<std::size_t>(i)] < 0) {
          dist[static_cast<std::size_t>(i)] = dist[static_cast<std::size_t>(j)] + 1;
          far = std::max(far, dist[static_cast<std::size_t>(i)]);
          ++reached;
          queue.push_back(i);
        }
      }
    }
    if (reached == n) {
      g.centres.push_back(c);
      best = std::min(best, far);
    }
  }
  g.quasi_strongly_connected = !g.centres.empty();
  g.radius = g.quasi_strongly_connected ? best : -1;
  return g;
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
