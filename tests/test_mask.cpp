// Masks and their graph analysis (SCIENCE.md section 2).
#include <catch2/catch.hpp>

#include "core/errors.hpp"
#include "model/mask.hpp"

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

TEST_CASE("a mask without self-loops is rejected", "[mask]") {
  CHECK_THROWS_AS(check_mask(from_rows({{1, 1}, {1, 0}}), "test mask"), UsageError);
  CHECK_THROWS_WITH(check_mask(from_rows({{1, 1}, {1, 0}}), "test mask"), Catch::Matchers::Contains("token 1"));
  CHECK_NOTHROW(check_mask(causal_mask(3), "causal"));
}
