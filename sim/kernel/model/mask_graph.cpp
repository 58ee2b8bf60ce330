// The graph analysis of a mask (mask.hpp's analyse_mask, mask_ranges.hpp's on ranges): one
// algorithm on two representations of the edges j -> i (token i attends to token j).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "kernel/model/mask.hpp"
#include "kernel/model/mask_ranges.hpp"

namespace rcsim {

namespace {

// The dense mask: successors of node j = the nonzero entries of column j of `m` (contiguous in
// Eigen's column-major storage), predecessors of v = column v of the transpose. O(N^2) per search.
class DenseGraph {
 public:
  explicit DenseGraph(const MaskMatrix& m) : m_(m), mt_(m.transpose()) {}
  int size() const { return static_cast<int>(m_.rows()); }
  int successors(int v) const { return static_cast<int>(m_.col(v).cast<int>().sum()); }

  // Breadth-first search from `source` along the edges (`forward`) or against them. Fills `dist`
  // (-1: unreached) and returns the number of nodes reached; `ecc` receives the largest distance.
  int search(int source, bool forward, std::vector<int>& dist, std::vector<int>& queue, int& ecc) const {
    const MaskMatrix& adj = forward ? m_ : mt_;
    const int n = size();
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
  // this one does. Iterative; each node's successors are tried in ascending order.
  int last_finished() const {
    const int n = size();
    std::vector<char> seen(static_cast<std::size_t>(n), 0);
    std::vector<std::pair<int, int>> stack;  // (node, next successor to try)
    int last = 0;
    for (int root = 0; root < n; ++root) {
      if (seen[static_cast<std::size_t>(root)]) continue;
      seen[static_cast<std::size_t>(root)] = 1;
      stack.emplace_back(root, 0);
      while (!stack.empty()) {
        auto& [j, i] = stack.back();
        const std::uint8_t* column = m_.data() + static_cast<std::ptrdiff_t>(j) * n;
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

 private:
  const MaskMatrix& m_;
  const MaskMatrix mt_;
};

// The nodes not yet visited, as a union-find of "the smallest unvisited node >= i" (path halving):
// a traversal skips the visited nodes of a range without looking at them, so that a search costs
// O((N + intervals) alpha(N)) whatever the ranges' lengths.
class Unvisited {
 public:
  void reset(int n) {
    next_.resize(static_cast<std::size_t>(n) + 1);
    std::iota(next_.begin(), next_.end(), 0);  // next_[n] = n: the end
  }
  int find(int i) {
    while (next_[static_cast<std::size_t>(i)] != i) {
      next_[static_cast<std::size_t>(i)] = next_[static_cast<std::size_t>(next_[static_cast<std::size_t>(i)])];
      i = next_[static_cast<std::size_t>(i)];
    }
    return i;
  }
  void remove(int i) { next_[static_cast<std::size_t>(i)] = i + 1; }
  bool contains(int i) { return find(i) == i; }

 private:
  std::vector<int> next_;
};

// The mask as ranges: successors of j = the column ranges of j, predecessors of v = the row
// ranges of v. The same searches as DenseGraph's, node for node (ascending order within a node).
class RangeGraph {
 public:
  RangeGraph(const MaskRanges& rows, const MaskRanges& columns) : rows_(rows), columns_(columns) {}
  int size() const { return rows_.rows(); }
  int successors(int v) const {
    int count = 0;
    for (std::size_t k = first(columns_, v); k < first(columns_, v + 1); ++k) count += columns_.hi[k] - columns_.lo[k];
    return count;
  }

  int search(int source, bool forward, std::vector<int>& dist, std::vector<int>& queue, int& ecc) {
    const MaskRanges& adj = forward ? columns_ : rows_;
    std::fill(dist.begin(), dist.end(), -1);
    unvisited_.reset(size());
    queue.clear();
    dist[static_cast<std::size_t>(source)] = 0;
    unvisited_.remove(source);
    queue.push_back(source);
    ecc = 0;
    for (std::size_t head = 0; head < queue.size(); ++head) {
      const int j = queue[head];
      const int next = dist[static_cast<std::size_t>(j)] + 1;
      for (std::size_t k = first(adj, j); k < first(adj, j + 1); ++k)
        for (int i = unvisited_.find(adj.lo[k]); i < adj.hi[k]; i = unvisited_.find(i)) {
          dist[static_cast<std::size_t>(i)] = next;
          ecc = next;
          queue.push_back(i);
          unvisited_.remove(i);
        }
    }
    return static_cast<int>(queue.size());
  }

  int last_finished() {
    struct Frame {
      int node;
      std::size_t range;  // the next column range of `node` to look in
    };
    unvisited_.reset(size());
    std::vector<Frame> stack;
    int last = 0;
    for (int root = 0; root < size(); ++root) {
      if (!unvisited_.contains(root)) continue;
      unvisited_.remove(root);
      stack.push_back({root, first(columns_, root)});
      while (!stack.empty()) {
        Frame& f = stack.back();
        int child = -1;
        for (; f.range < first(columns_, f.node + 1) && child < 0; ++f.range) {
          const int i = unvisited_.find(columns_.lo[f.range]);
          if (i < columns_.hi[f.range]) child = i;
        }
        if (child < 0) {
          stack.pop_back();
          continue;
        }
        --f.range;  // the range may hold more unvisited successors
        unvisited_.remove(child);
        stack.push_back({child, first(columns_, child)});
      }
      last = root;
    }
    return last;
  }

 private:
  static std::size_t first(const MaskRanges& r, int v) { return r.start[static_cast<std::size_t>(v)]; }
  const MaskRanges& rows_;
  const MaskRanges& columns_;
  Unvisited unvisited_;
};

// What the radius search knows of one centre: lower <= its eccentricity <= upper, its number of
// successors (the tie-break between far ends), and whether it was searched from.
struct CentreBounds {
  int lower, upper, successors;
  bool done;
};

// Centres and radius along the information-flow edges j -> i of `graph`.
template <class Graph>
MaskGraph analyse(Graph& graph) {
  const int n = graph.size();
  MaskGraph g;
  if (n == 0) return g;
  std::vector<int> forward(static_cast<std::size_t>(n)), backward(static_cast<std::size_t>(n)), queue;
  queue.reserve(static_cast<std::size_t>(n));

  // Centres: if some node reaches every node, the last-finished node of a depth-first traversal
  // does; the centres are then exactly the nodes that reach it.
  const int root = graph.last_finished();
  int ecc = 0, ignored = 0;
  ++g.searches;
  if (graph.search(root, true, forward, queue, ecc) < n) return g;
  ++g.searches;
  graph.search(root, false, backward, queue, ignored);
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
  std::vector<CentreBounds> bounds;
  bounds.reserve(k);
  for (const int v : g.centres)  // n > 1: a centre reaches some other node
    bounds.push_back({n > 1 ? 1 : 0, std::numeric_limits<int>::max(), graph.successors(v), false});
  int best = std::numeric_limits<int>::max();
  std::size_t u = static_cast<std::size_t>(
      std::lower_bound(g.centres.begin(), g.centres.end(), root) - g.centres.begin());
  for (bool far_end = true;; far_end = !far_end) {
    bounds[u].done = true;
    best = std::min(best, ecc);
    for (std::size_t c = 0; c < k; ++c) {
      const auto v = static_cast<std::size_t>(g.centres[c]);
      bounds[c].lower = std::max({bounds[c].lower, backward[v], ecc - forward[v]});
      bounds[c].upper = std::min(bounds[c].upper, backward[v] + ecc);
    }
    std::size_t low = k, high = k;
    for (std::size_t c = 0; c < k; ++c) {
      const CentreBounds& b = bounds[c];
      if (b.done) continue;
      // A far end (even if no candidate): largest upper bound, then fewest successors (the
      // ends of a window have the fewest).
      if (high == k || b.upper > bounds[high].upper ||
          (b.upper == bounds[high].upper && b.successors < bounds[high].successors))
        high = c;
      if (b.lower < best && (low == k || b.lower < bounds[low].lower ||
                             (b.lower == bounds[low].lower && b.upper < bounds[low].upper)))
        low = c;
    }
    if (low == k) break;
    u = far_end ? high : low;
    g.searches += 2;
    graph.search(g.centres[u], true, forward, queue, ecc);
    graph.search(g.centres[u], false, backward, queue, ignored);
  }
  g.radius = best;
  return g;
}

}  // namespace

MaskGraph analyse_mask(const MaskMatrix& m) {
  DenseGraph graph(m);
  return analyse(graph);
}

MaskGraph analyse_mask(const MaskRanges& rows, const MaskRanges& columns) {
  RangeGraph graph(rows, columns);
  return analyse(graph);
}

}  // namespace rcsim
