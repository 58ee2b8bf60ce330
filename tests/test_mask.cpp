// Masks and their graph analysis (docs/science/model-spec.md section 2).
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "kernel/support/errors.hpp"
#include "kernel/model/mask.hpp"

using namespace rcsim;

namespace {
MaskMatrix from_rows(const std::vector<std::vector<int>>& rows) {
  MaskMatrix m(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(rows.size()));
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = 0; j < rows.size(); ++j)
      m(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = static_cast<std::uint8_t>(rows[i][j]);
  return m;
}
}  // namespace

TEST_CASE("masks worked by hand for N = 4", "[mask]") {
  CHECK(complete_mask(4) == from_rows({{1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}}));
  CHECK(causal_mask(4) == from_rows({{1, 0, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 1}}));
  CHECK(sliding_window_mask(4, 1) == from_rows({{1, 1, 0, 0}, {1, 1, 1, 0}, {0, 1, 1, 1}, {0, 0, 1, 1}}));
  CHECK(unidirectional_sliding_window_mask(4, 1) == from_rows({{1, 0, 0, 0}, {1, 1, 0, 0}, {0, 1, 1, 0}, {0, 0, 1, 1}}));
}

TEST_CASE("graph analysis worked by hand", "[mask]") {
  SECTION("complete: every node a centre, radius 1") {
    const MaskGraph g = analyse_mask(complete_mask(5));
    CHECK(g.quasi_strongly_connected);
    CHECK(g.centres == std::vector<int>{0, 1, 2, 3, 4});
    CHECK(g.radius == 1);
  }
  SECTION("causal: token 0 is the only centre") {
    const MaskGraph g = analyse_mask(causal_mask(5));
    CHECK(g.centres == std::vector<int>{0});
    CHECK(g.radius == 1);
  }
  SECTION("unidirectional window w = 1 on 5 tokens is a path 0 -> 1 -> ... -> 4") {
    const MaskGraph g = analyse_mask(unidirectional_sliding_window_mask(5, 1));
    CHECK(g.centres == std::vector<int>{0});
    CHECK(g.radius == 4);
  }
  SECTION("sliding window w = 1 on 5 tokens: centre 2 has eccentricity 2") {
    const MaskGraph g = analyse_mask(sliding_window_mask(5, 1));
    CHECK(g.centres.size() == 5);
    CHECK(g.radius == 2);
  }
  SECTION("self-loops only: not quasi-strongly connected") {
    const MaskGraph g = analyse_mask(from_rows({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}));
    CHECK_FALSE(g.quasi_strongly_connected);
    CHECK(g.centres.empty());
    CHECK(g.radius == -1);
  }
  SECTION("two roots feeding one node: no single centre reaches both") {
    // token 2 attends to 0 and 1; 0 and 1 attend only to themselves.
    const MaskGraph g = analyse_mask(from_rows({{1, 0, 0}, {0, 1, 0}, {1, 1, 1}}));
    CHECK_FALSE(g.quasi_strongly_connected);
  }
  SECTION("edge direction: token 1 attends to 0, so 0 reaches 1 (information flows j -> i)") {
    const MaskGraph g = analyse_mask(from_rows({{1, 0}, {1, 1}}));
    CHECK(g.centres == std::vector<int>{0});
  }
}

TEST_CASE("BFS radius agrees with the table's formulas", "[mask]") {
  const int n = GENERATE(2, 3, 7, 8, 16, 33);
  const int w = GENERATE(1, 2, 3, 5);
  INFO("N = " << n << ", w = " << w);
  CHECK(analyse_mask(sliding_window_mask(n, w)).radius == radius_formula(MaskType::sliding_window, n, w));
  CHECK(analyse_mask(unidirectional_sliding_window_mask(n, w)).radius ==
        radius_formula(MaskType::unidirectional_sliding_window, n, w));
  CHECK(analyse_mask(causal_mask(n)).radius == 1);
  CHECK(analyse_mask(complete_mask(n)).radius == 1);
}

namespace {
// Independent reference for the graph analysis: all-pairs distances by Floyd-Warshall (O(N^3),
// small N only) along j -> i iff m(i, j), then centres and radius straight from the definition.
MaskGraph floyd_warshall_graph(const MaskMatrix& m) {
  const int n = static_cast<int>(m.rows());
  const int inf = 1 << 20;
  std::vector<std::vector<int>> d(n, std::vector<int>(n, inf));
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i)
      if (i == j) d[j][i] = 0;
      else if (m(i, j)) d[j][i] = 1;  // d[from][to]
  for (int k = 0; k < n; ++k)
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) d[a][b] = std::min(d[a][b], d[a][k] + d[k][b]);
  MaskGraph g;
  int best = inf;
  for (int c = 0; c < n; ++c) {
    const int ecc = *std::max_element(d[c].begin(), d[c].end());
    if (ecc < inf) {
      g.centres.push_back(c);
      best = std::min(best, ecc);
    }
  }
  g.quasi_strongly_connected = !g.centres.empty();
  g.radius = g.quasi_strongly_connected ? best : -1;
  return g;
}
}  // namespace

TEST_CASE("graph analysis agrees with Floyd-Warshall on random masks", "[mask]") {
  // Sparse random masks (with self-loops) are often not quasi-strongly connected, denser ones
  // are, with radii from 1 to several; a random relabelling hides any help from token order.
  std::mt19937 gen(12345);
  int connected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + trial % 23;
    const double p = std::uniform_real_distribution<double>(0.02, 0.5)(gen);
    std::bernoulli_distribution edge(p);
    MaskMatrix m(n, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) m(i, j) = (i == j || edge(gen)) ? 1 : 0;
    const MaskGraph want = floyd_warshall_graph(m);
    const MaskGraph got = analyse_mask(m);
    INFO("trial " << trial << ", N = " << n << ", p = " << p);
    CHECK(got.quasi_strongly_connected == want.quasi_strongly_connected);
    CHECK(got.centres == want.centres);
    CHECK(got.radius == want.radius);
    connected += want.quasi_strongly_connected ? 1 : 0;
  }
  CHECK(connected > 50);   // both kinds of mask were exercised
  CHECK(connected < 280);
}

TEST_CASE("graph analysis of the built-in masks needs a few searches, not one per token", "[mask]") {
  // The old analysis searched from every token (O(N^3)); with the eccentricity bounds the radius
  // of the built-in masks takes at most three searches each way (the bounds are exact after the
  // far ends).
  const int n = 1001;
  const std::vector<std::pair<const char*, MaskMatrix>> masks{
      {"complete", complete_mask(n)},
      {"causal", causal_mask(n)},
      {"sliding window 7", sliding_window_mask(n, 7)},
      {"sliding window 1", sliding_window_mask(n, 1)},
      {"sliding window 250", sliding_window_mask(n, 250)},
      {"unidirectional window 7", unidirectional_sliding_window_mask(n, 7)}};
  for (const auto& [name, m] : masks) {
    INFO(name);
    CHECK(analyse_mask(m).searches <= 6);
  }
  CHECK(analyse_mask(sliding_window_mask(n, 7)).radius == radius_formula(MaskType::sliding_window, n, 7));
  CHECK(analyse_mask(sliding_window_mask(n, 1)).radius == 500);
  CHECK(analyse_mask(complete_mask(n)).centres.size() == static_cast<std::size_t>(n));
}

TEST_CASE("a mask without self-loops is rejected", "[mask]") {
  CHECK_THROWS_AS(check_mask(from_rows({{1, 1}, {1, 0}}), "test mask"), UsageError);
  CHECK_THROWS_WITH(check_mask(from_rows({{1, 1}, {1, 0}}), "test mask"), Catch::Matchers::Contains("token 1"));
  CHECK_NOTHROW(check_mask(causal_mask(3), "causal"));
}
