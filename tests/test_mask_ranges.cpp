// Masks kept as row ranges (kernel/model/mask_ranges.hpp) against the dense masks of mask.hpp: the same
// entries, the same row structure, the same graph analysis, and the table's closed forms.
#include <catch2/catch.hpp>

#include <climits>
#include <stdexcept>
#include <random>
#include <vector>

#include "kernel/ops/attention.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/model/mask_ranges.hpp"

using namespace rcsim;

namespace {

MaskMatrix dense_builtin(MaskType type, int n, int w) {
  switch (type) {
    case MaskType::complete: return complete_mask(n);
    case MaskType::causal: return causal_mask(n);
    case MaskType::sliding_window: return sliding_window_mask(n, w);
    case MaskType::unidirectional_sliding_window: return unidirectional_sliding_window_mask(n, w);
    case MaskType::custom: break;
  }
  throw std::logic_error("no dense builder");
}

const MaskType kBuiltin[] = {MaskType::complete, MaskType::causal, MaskType::sliding_window,
                             MaskType::unidirectional_sliding_window};

void check_same_graph(const MaskGraph& got, const MaskGraph& want) {
  CHECK(got.quasi_strongly_connected == want.quasi_strongly_connected);
  CHECK(got.centres == want.centres);
  CHECK(got.radius == want.radius);
  CHECK(got.searches == want.searches);  // the same algorithm, search for search
}

void check_same_rows(const MaskRows& got, const MaskRows& want) {
  CHECK(got.contiguous == want.contiguous);
  CHECK(got.lower_triangular == want.lower_triangular);
  CHECK(got.lo == want.lo);
  CHECK(got.hi == want.hi);
}

}  // namespace

TEST_CASE("mask ranges worked by hand for N = 5", "[mask]") {
  const MaskRanges r = builtin_mask_ranges(MaskType::sliding_window, 5, 1);
  CHECK(r.start == std::vector<std::size_t>{0, 1, 2, 3, 4, 5});
  CHECK(r.lo == std::vector<int>{0, 0, 1, 2, 3});
  CHECK(r.hi == std::vector<int>{2, 3, 4, 5, 5});
  // uni-directional window w = 2: row i is [i - 2, i]; column j (the transpose) is [j, j + 2]
  const MaskRanges u = builtin_mask_ranges(MaskType::unidirectional_sliding_window, 5, 2);
  CHECK(u.lo == std::vector<int>{0, 0, 0, 1, 2});
  CHECK(u.hi == std::vector<int>{1, 2, 3, 4, 5});
  const MaskRanges ut = builtin_mask_ranges(MaskType::unidirectional_sliding_window, 5, 2, true);
  CHECK(ut.lo == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(ut.hi == std::vector<int>{3, 4, 5, 5, 5});
  // the runs of a dense row: 1 1 0 1 -> [0, 2), [3, 4)
  MaskMatrix m(2, 4);
  m << 1, 1, 0, 1, 0, 0, 1, 0;
  const MaskRanges d = ranges_of(m);
  CHECK(d.start == std::vector<std::size_t>{0, 2, 3});
  CHECK(d.lo == std::vector<int>{0, 3, 2});
  CHECK(d.hi == std::vector<int>{2, 4, 3});
}

TEST_CASE("built-in mask ranges equal the dense masks, their rows and their graph", "[mask]") {
  for (const MaskType type : kBuiltin)
    for (int n = 1; n <= 40; ++n)
      for (const int w : {1, 2, 3, 5, n - 1, n, n + 1, INT_MAX}) {
        if (w < 1) continue;
        INFO("mask type " << static_cast<int>(type) << ", N = " << n << ", w = " << w);
        const MaskMatrix dense = dense_builtin(type, n, w);
        const MaskRanges rows = builtin_mask_ranges(type, n, w), columns = builtin_mask_ranges(type, n, w, true);
        REQUIRE(dense_mask(rows) == dense);
        REQUIRE(dense_mask(columns) == MaskMatrix(dense.transpose()));
        check_same_rows(mask_rows(rows), analyse_rows(dense));
        const MaskGraph graph = analyse_mask(rows, columns);
        check_same_graph(graph, analyse_mask(dense));
        CHECK(graph.radius == radius_formula(type, n, w));
      }
}

TEST_CASE("the graph of ranges equals the dense graph on random masks of several runs per row", "[mask]") {
  std::mt19937 gen(2026);
  int connected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + trial % 31;
    const double p = std::uniform_real_distribution<double>(0.02, 0.6)(gen);
    std::bernoulli_distribution edge(p);
    MaskMatrix m(n, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) m(i, j) = (i == j || edge(gen)) ? 1 : 0;
    INFO("trial " << trial << ", N = " << n << ", p = " << p);
    const MaskRanges rows = ranges_of(m);
    REQUIRE(dense_mask(rows) == m);
    check_same_rows(mask_rows(rows), analyse_rows(m));
    const MaskGraph want = analyse_mask(m);
    check_same_graph(analyse_mask(rows, ranges_of(MaskMatrix(m.transpose()))), want);
    connected += want.quasi_strongly_connected ? 1 : 0;
  }
  CHECK(connected > 50);  // both kinds of mask were exercised
  CHECK(connected < 280);
}

TEST_CASE("the graph of a built-in mask at N = 200000 from its ranges, by the table", "[mask]") {
  // 4 x 10^10 entries as a dense mask; as ranges a few searches of O(N) each.
  const int n = 200000;
  for (const MaskType type : kBuiltin)
    for (const int w : {1, 7, 1000, 150000}) {
      INFO("mask type " << static_cast<int>(type) << ", w = " << w);
      const MaskGraph g = analyse_mask(builtin_mask_ranges(type, n, w), builtin_mask_ranges(type, n, w, true));
      CHECK(g.quasi_strongly_connected);
      CHECK(g.radius == radius_formula(type, n, w));
      CHECK(g.searches <= 6);
      const bool single = type == MaskType::causal || type == MaskType::unidirectional_sliding_window;
      CHECK(g.centres.size() == (single ? 1u : static_cast<std::size_t>(n)));  // token 0, or every token
      CHECK(g.centres.front() == 0);
    }
}

TEST_CASE("the engine's mask is dense only when asked, with the same rows and graph", "[mask]") {
  ModelSpec c;
  c.model.tokens = 23;
  c.mask.type = MaskType::sliding_window;
  c.mask.window = 4;
  const EngineMask ranges_only = engine_mask(c, nullptr, false);
  CHECK(ranges_only.dense.size() == 0);
  const MaskMatrix dense = sliding_window_mask(23, 4);
  check_same_rows(ranges_only.rows, analyse_rows(dense));
  check_same_graph(ranges_only.graph, analyse_mask(dense));
  CHECK(engine_mask(c, nullptr, true).dense == dense);
  // a custom mask is kept dense, checked as make_mask checks it
  c.mask.type = MaskType::custom;
  MaskMatrix custom = MaskMatrix::Identity(23, 23);
  custom(5, 2) = 1;
  const EngineMask m = engine_mask(c, &custom, false);
  CHECK(m.dense == custom);
  CHECK_FALSE(m.rows.contiguous);
  CHECK_FALSE(m.graph.quasi_strongly_connected);
  custom(3, 3) = 0;
  CHECK_THROWS_AS(engine_mask(c, &custom, false), UsageError);
}
