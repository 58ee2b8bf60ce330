#include "kernel/mask.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include "kernel/errors.hpp"

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

namespace {

// Breadth-first search from `source` where the successors of node j are the nonzero entries of
// column j of `adj` (contiguous in Eigen's column-major storage). Fills `dist` (-1: unreached)
// and returns the number of nodes reached; `ecc` receives the largest distance. O(N^2).
int breadth_first(const MaskMatrix& adj, int source, std::vector<int>& dist, std::vector<int>& queue, int& ecc) {
  const int n = static_cast<int>(adj.rows());
  std::fill(dist.begin(), dist.end(), -1);
  queue.clear();
  dist[static_cast<std::size_t>(source)] = 0;
  queue.push_back(source);
  ecc = 0;
  for (std::size_t head = 0; head < queue.size(); ++head) {
    const int j = queue[head];
    const int next = dist[static_cast<std::size_t>(j)] + 1;
    const std::uint8_t* column = adj.data() + static_cast<std::ptrdiff_t>(j) * n;
    for (int i = 0; i < n; ++i) {
      if (column[i] && dist[static_cast<std::size_t>(i)] < 0) {
        dist[static_cast<std::size_t>(i)] = next;
        ecc = next;
        queue.push_back(i);
      }
    }
  }
  return static_cast<int>(queue.size());
}

// The node that finishes last in a depth-first traversal of all nodes (the first pass of
// Kosaraju's algorithm): it lies in a source component, so if any node reaches every node,
// this one does. Iterative, O(N^2) on the matrix.
int last_finished(const MaskMatrix& adj) {
  const int n = static_cast<int>(adj.rows());
  std::vector<char> seen(static_cast<std::size_t>(n), 0);
  std::vector<std::pair<int, int>> stack;  // (node, next successor to try)
  int last = 0;
  for (int root = 0; root < n; ++root) {
    if (seen[static_cast<std::size_t>(root)]) continue;
    seen[static_cast<std::size_t>(root)] = 1;
    stack.emplace_back(root, 0);
    while (!stack.empty()) {
      auto& [j, i] = stack.back();
      const std::uint8_t* column = adj.data() + static_cast<std::ptrdiff_t>(j) * n;
      while (i < n && (!column[i] || seen[static_cast<std::size_t>(i)])) ++i;
      if (i == n) {
        stack.pop_back();
        continue;
      }
      const int child = i++;
      seen[static_cast<std::size_t>(child)] = 1;
      stack.emplace_back(child, 0);
    }
    last = root;
  }
  return last;
}

}  // namespace

MaskGraph analyse_mask(const MaskMatrix& m) {
  // Edge j -> i iff token i attends to token j: successors of j = column j of m, predecessors
  // of v = row v of m = column v of m^T.
  const int n = static_cast<int>(m.rows());
  MaskGraph g;
  if (n == 0) return g;
  const MaskMatrix mt = m.transpose();
  std::vector<int> forward(static_cast<std::size_t>(n)), backward(static_cast<std::size_t>(n)), queue;
  queue.reserve(static_cast<std::size_t>(n));

  // Centres: if some node reaches every node, the last-finished node of a depth-first traversal
  // does; the centres are then exactly the nodes that reach it.
  const int root = last_finished(m);
  int ecc = 0, ignored = 0;
  ++g.searches;
  if (breadth_first(m, root, forward, queue, ecc) < n) return g;
  ++g.searches;
  breadth_first(mt, root, backward, queue, ignored);
  for (int v = 0; v < n; ++v)
    if (backward[static_cast<std::size_t>(v)] >= 0) g.centres.push_back(v);
  g.quasi_strongly_connected = true;

  // Radius = min eccentricity over the centres, with the eccentricity bounds of Takes and Kosters
  // (2011): after searching from a centre u both ways, every centre v has
  //   max(d(v, u), ecc(u) - d(u, v)) <= ecc(v) <= d(v, u) + ecc(u)
  // (v reaches u; triangle inequalities at u). Searches alternate between the centre of largest
  // upper bound (the far ends, which make the lower bounds sharp) and the centre of smallest
  // lower bound; once no lower bound is below the best eccentricity found, that is the radius.
  // For the built-in masks the bounds are exact after the far ends: at most three pairs of
  // searches.
  const std::size_t k = g.centres.size();
  std::vector<int> lower(k, n > 1 ? 1 : 0);  // n > 1: a centre reaches some other node
  std::vector<int> upper(k, std::numeric_limits<int>::max());
  std::vector<char> done(k, 0);
  std::vector<int> successors(k);
  for (std::size_t c = 0; c < k; ++c) successors[c] = static_cast<int>(m.col(g.centres[c]).cast<int>().sum());
  int best = std::numeric_limits<int>::max();
  std::size_t u = static_cast<std::size_t>(
      std::lower_bound(g.centres.begin(), g.centres.end(), root) - g.centres.begin());
  for (bool far_end = true;; far_end = !far_end) {
    done[u] = 1;
    best = std::min(best, ecc);
    for (std::size_t c = 0; c < k; ++c) {
      const auto v = static_cast<std::size_t>(g.centres[c]);
      lower[c] = std::max({lower[c], backward[v], ecc - forward[v]});
      upper[c] = std::min(upper[c], backward[v] + ecc);
    }
    std::size_t low = k, high = k;
    for (std::size_t c = 0; c < k; ++c) {
      if (done[c]) continue;
      // A far end (even if no candidate): largest upper bound, then fewest successors (the
      // ends of a window have the fewest).
      if (high == k || upper[c] > upper[high] || (upper[c] == upper[high] && successors[c] < successors[high]))
        high = c;
      if (lower[c] < best && (low == k || lower[c] < lower[low] || (lower[c] == lower[low] && upper[c] < upper[low])))
        low = c;
    }
    if (low == k) break;
    u = far_end ? high : low;
    g.searches += 2;
    breadth_first(m, g.centres[u], forward, queue, ecc);
    breadth_first(mt, g.centres[u], backward, queue, ignored);
  }
  g.radius = best;
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
