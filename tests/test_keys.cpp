// Selectable keys (docs/science/model-spec.md 5.6; sim/geometry/selectability.hpp) and Brody's experiments (sim/geometry/brody.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "config/config.hpp"
#include "geometry/brody.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/model/random.hpp"
#include "geometry/selectability.hpp"

using namespace rcsim;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

namespace {

Matrix keys2(std::initializer_list<std::pair<double, double>> pts) {
  Matrix K(static_cast<Eigen::Index>(pts.size()), 2);
  Eigen::Index i = 0;
  for (const auto& [x, y] : pts) K.row(i++) << x, y;
  return K;
}

std::vector<std::uint8_t> decisions(const Matrix& K, bool screen = false) {
  return analyse_keys(K, kSelectabilityRtol, screen).selectable;
}

// Independent brute force for d = 2 (no LP): key i is selectable iff some direction
// q(theta) = (cos theta, sin theta) gives q.(k_i - k_j) > 0 for all j. Each constraint changes
// sign only where q is orthogonal to k_i - k_j, so it suffices to test the midpoints between
// consecutive critical angles (and one angle if there are none).
bool brute_force_selectable_2d(const Matrix& K, Eigen::Index i) {
  const double pi = 3.14159265358979323846;
  std::vector<double> crit;
  for (Eigen::Index j = 0; j < K.rows(); ++j) {
    if (j == i) continue;
    const double dx = K(i, 0) - K(j, 0), dy = K(i, 1) - K(j, 1);
    if (dx == 0 && dy == 0) return false;  // a duplicate is never strictly beaten
    const double a = std::atan2(dy, dx);
    crit.push_back(std::fmod(a + pi / 2 + 4 * pi, 2 * pi));
    crit.push_back(std::fmod(a - pi / 2 + 4 * pi, 2 * pi));
  }
  if (crit.empty()) return true;
  std::sort(crit.begin(), crit.end());
  crit.push_back(crit.front() + 2 * pi);
  for (std::size_t c = 0; c + 1 < crit.size(); ++c) {
    if (crit[c + 1] - crit[c] < 1e-12) continue;  // an empty arc
    const double th = 0.5 * (crit[c] + crit[c + 1]);
    const double qx = std::cos(th), qy = std::sin(th);
    bool all = true;
    for (Eigen::Index j = 0; j < K.rows() && all; ++j)
      if (j != i) all = qx * (K(i, 0) - K(j, 0)) + qy * (K(i, 1) - K(j, 1)) > 1e-12;
    if (all) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("hand-worked key sets", "[keys][glpk]") {
  SECTION("a key strictly inside the triangle of three others is unselectable") {
    const Matrix K = keys2({{0, 0}, {4, 0}, {0, 4}, {1, 1}});
    const KeySelectability s = analyse_keys(K);
    CHECK(s.selectable == std::vector<std::uint8_t>{1, 1, 1, 0});
    CHECK(s.unselectable_count() == 1);
    CHECK(s.unselectable_fraction() == 0.25);
    CHECK_THAT(s.margin(3), WithinAbs(0.0, 1e-12));
    // L1 distance of (0, 0) from the triangle (4,0), (0,4), (1,1): 2, attained at (1, 1) (every
    // point (1 + 3s, 1 - s) of the edges from (1, 1) has L1 norm 2 + 2s).
    CHECK_THAT(s.margin(0), WithinRel(2.0, 1e-9));
    // Every selectable key comes with a query that gives it the strictly largest score.
    for (int i = 0; i < 3; ++i) {
      const Vector scores = K * s.query.row(i).transpose();
      for (int j = 0; j < 4; ++j)
        if (j != i) CHECK(scores(i) > scores(j));
    }
  }
  SECTION("keys on a circle are all selectable") {
    Matrix K(12, 2);
    for (int i = 0; i < 12; ++i) K.row(i) << std::cos(0.5 * i), std::sin(0.5 * i);
    const KeySelectability s = analyse_keys(K);
    CHECK(s.unselectable_count() == 0);
  }
  SECTION("duplicate keys: neither copy can win strictly") {
    const Matrix K = keys2({{1, 0}, {1, 0}, {0, 1}, {-1, -1}});
    CHECK(decisions(K) == std::vector<std::uint8_t>{0, 0, 1, 1});
    CHECK(decisions(K, true) == std::vector<std::uint8_t>{0, 0, 1, 1});
  }
  SECTION("a key on the hull boundary (midpoint of an edge) is unselectable") {
    const Matrix K = keys2({{0, 0}, {2, 0}, {1, 0}, {1, 3}});
    const KeySelectability s = analyse_keys(K);
    CHECK(s.selectable == std::vector<std::uint8_t>{1, 1, 0, 1});
    CHECK_THAT(s.margin(2), WithinAbs(0.0, 1e-12));
  }
  SECTION("fewer keys than d + 1: affinely independent keys are all selectable") {
    RandomStream rng(7, 0);
    Matrix K(3, 5);
    rng.fill_normal(K);
    CHECK(analyse_keys(K).unselectable_count() == 0);
    CHECK(analyse_keys(K.topRows(1)).selectable == std::vector<std::uint8_t>{1});  // n = 1
    CHECK(analyse_keys(Matrix(0, 3)).selectable.empty());
  }
  SECTION("d = 1: only the largest and the smallest key are selectable") {
    Matrix K(4, 1);
    K << -1.0, 0.5, 2.0, 0.25;
    CHECK(decisions(K) == std::vector<std::uint8_t>{1, 0, 1, 0});
  }
  SECTION("a key far inside stays unselectable however the set is scaled") {
    for (double scale : {1e-6, 1.0, 1e6}) {
      const Matrix K = scale * keys2({{0, 0}, {4, 0}, {0, 4}, {1, 1}});
      CHECK(decisions(K) == std::vector<std::uint8_t>{1, 1, 1, 0});
    }
  }
  SECTION("non-finite keys are a usage error") {
    Matrix K = keys2({{0, 0}, {1, 0}});
    K(1, 1) = std::nan("");
    CHECK_THROWS(analyse_keys(K));
  }
}

TEST_CASE("LP agrees with an angular brute force in d = 2", "[keys][glpk]") {
  const int n = GENERATE(3, 4, 6, 10, 25, 60);
  int compared = 0, unselectable = 0;
  for (int draw = 0; draw < 20; ++draw) {
    const Matrix K = gaussian_keys(n, 2, 99, draw);
    const auto lp = decisions(K);
    const auto screened = decisions(K, true);
    for (Eigen::Index i = 0; i < n; ++i) {
      INFO("n = " << n << ", draw " << draw << ", key " << i);
      CHECK(static_cast<bool>(lp[static_cast<std::size_t>(i)]) == brute_force_selectable_2d(K, i));
      CHECK(screened[static_cast<std::size_t>(i)] == lp[static_cast<std::size_t>(i)]);
      ++compared;
      unselectable += lp[static_cast<std::size_t>(i)] ? 0 : 1;
    }
  }
  CHECK(compared == 20 * n);
  if (n >= 6) CHECK(unselectable > 0);  // the comparison covers both outcomes
}

TEST_CASE("after sphere or LayerNorm (eps = 0) no key is unselectable (docs/science/model-spec.md 5.6)", "[keys][glpk][theory]") {
  const int d = GENERATE(3, 5, 10);
  const NormType type = GENERATE(NormType::sphere, NormType::layernorm, NormType::rmsnorm);
  int raw_unselectable = 0;
  for (int draw = 0; draw < 5; ++draw) {
    const Matrix K0 = gaussian_keys(40, d, 2023, draw);
    raw_unselectable += analyse_keys(K0).unselectable_count();
    Matrix K = K0;
    normalize_rows(K, Normalization(type, d, 0.0));
    INFO("d = " << d << ", norm " << to_string(type) << ", draw " << draw);
    CHECK(analyse_keys(K).unselectable_count() == 0);
    CHECK(analyse_keys(K, kSelectabilityRtol, true).unselectable_count() == 0);
  }
  if (d == 3) CHECK(raw_unselectable > 0);  // without normalisation there were some
}

TEST_CASE("LayerNorm with eps > 0 is not exactly a sphere: a low-d counterexample", "[keys][glpk][theory]") {
  // With eps > 0 a key with small ||P a|| lands strictly inside the sphere of radius sqrt(d) and,
  // in d = 3, close neighbours can cover it (docs/user/geometry.md; one such draw was verified with
  // scipy.optimize.linprog). Search the draws of (n, d) = (30, 3) for one: every key that is
  // unselectable with eps = 1e-5 must lie strictly inside the sphere, and with eps = 0 (every key
  // on the sphere) no key of the same draw is unselectable (docs/science/model-spec.md 5.6).
  int found = -1;
  for (int draw = 0; draw < 400 && found < 0; ++draw) {
    const Matrix K0 = gaussian_keys(30, 3, 20240527, static_cast<std::uint64_t>(draw));
    Matrix K = K0;
    normalize_rows(K, Normalization(NormType::layernorm, 3, 1e-5));
    const auto s = decisions(K);
    if (std::count(s.begin(), s.end(), 0) == 0) continue;
    found = draw;
    INFO("draw " << draw);
    for (Eigen::Index i = 0; i < K.rows(); ++i)
      if (s[static_cast<std::size_t>(i)] == 0) CHECK(K.row(i).norm() < std::sqrt(3.0) * (1 - 1e-9));
    Matrix K_exact = K0;
    normalize_rows(K_exact, Normalization(NormType::layernorm, 3, 0.0));
    CHECK(analyse_keys(K_exact).unselectable_count() == 0);
  }
  CHECK(found >= 0);  // the heat map gives such draws at a rate of several per cent at n = 30, d = 3
}

TEST_CASE("heat map cells equal the per-draw decisions of the same keys", "[keys][glpk]") {
  BrodyMapSpec spec;
  spec.count_min = 8;
  spec.count_max = 12;
  spec.dim_min = 3;
  spec.dim_max = 4;
  spec.draws = 6;
  spec.seed = 5;
  const BrodyMap m = brody_map(spec);
  REQUIRE(m.counts.size() == 5);
  REQUIRE(m.dims.size() == 2);
  for (std::size_t a = 0; a < m.dims.size(); ++a)
    for (std::size_t b = 0; b < m.counts.size(); ++b) {
      const int n = m.counts[b], d = m.dims[a];
      double frac = 0, any = 0;
      for (int t = 0; t < spec.draws; ++t) {
        const int u = analyse_keys(gaussian_keys(n, d, spec.seed, t)).unselectable_count();  // LP only
        frac += static_cast<double>(u) / n / spec.draws;
        any += (u > 0 ? 1.0 : 0.0) / spec.draws;
      }
      const auto ai = static_cast<Eigen::Index>(a), bi = static_cast<Eigen::Index>(b);
      CHECK_THAT(m.unselectable_fraction[0](ai, bi), WithinAbs(frac, 1e-12));
      CHECK_THAT(m.any_unselectable_fraction[0](ai, bi), WithinAbs(any, 1e-12));
      CHECK(m.unselectable_fraction[1](ai, bi) <= m.unselectable_fraction[0](ai, bi));
    }
  CHECK(m.unselectable_fraction[0].maxCoeff() > 0);
}

TEST_CASE("Brody's four-key example: a large key 3 makes its neighbour key 2 unselectable", "[keys][glpk]") {
  BrodyExampleSpec spec;
  spec.angles = 720;
  const BrodyExample ex = brody_example(spec);
  // [projection][scaling][magnitude index]
  for (int p = 0; p < 2; ++p)
    for (int s = 0; s < 2; ++s)
      for (std::size_t k = 0; k < spec.magnitudes.size(); ++k) {
        const Matrix& W = ex.weights[p][s][k];
        CHECK(W.rowwise().sum().isApprox(Vector::Ones(W.rows())));
      }
  // At magnitude 1 every key is selectable in every panel.
  for (int p = 0; p < 2; ++p)
    for (int s = 0; s < 2; ++s) CHECK(ex.selectable[p][s][0] == std::vector<std::uint8_t>{1, 1, 1, 1});
  // Without scaling, key 2 becomes unselectable at large magnitude; with scaling never.
  CHECK(ex.selectable[0][0][3][1] == 0);
  CHECK(ex.selectable[1][0][3][1] == 0);
  for (std::size_t k = 0; k < spec.magnitudes.size(); ++k) {
    CHECK(ex.selectable[0][1][k] == std::vector<std::uint8_t>{1, 1, 1, 1});
    CHECK(ex.selectable[1][1][k] == std::vector<std::uint8_t>{1, 1, 1, 1});
  }
  // Unselectable means: no query angle gives key 2 the largest weight (the sweep agrees with the LP).
  for (int p = 0; p < 2; ++p)
    for (int s = 0; s < 2; ++s)
      for (std::size_t k = 0; k < spec.magnitudes.size(); ++k) {
        const Matrix& W = ex.weights[p][s][k];
        bool key2_wins = false;
        for (Eigen::Index a = 0; a < W.rows(); ++a) {
          Eigen::Index best = 0;
          W.row(a).maxCoeff(&best);
          key2_wins = key2_wins || best == 1;
        }
        INFO("projection " << p << ", scaling " << s << ", magnitude " << spec.magnitudes[k]);
        CHECK(key2_wins == static_cast<bool>(ex.selectable[p][s][k][1]));
      }
}

TEST_CASE("exact re-check resolves a key that sticks out by less than GLPK's tolerance", "[keys][glpk]") {
  // Keys on a circle of radius sqrt(3) in the plane orthogonal to (1, 1, 1) (LayerNorm with
  // eps = 0, d = 3), two of them 3.2e-5 rad apart. Every key on a sphere is selectable
  // (docs/science/model-spec.md 5.6); the floating-point simplex (tolerances 1e-7) may call the close pair
  // unselectable, the exact simplex must not: its margin is positive and tiny (~R delta^2).
  const Vector u = (Vector(3) << 1, -1, 0).finished().normalized();
  const Vector v = (Vector(3) << 1, 1, -2).finished().normalized();
  const double R = std::sqrt(3.0), delta = 3.2e-5;
  // The pair sits between neighbours 0.004 rad away, so it sticks out of the hull of the others
  // by about R delta 0.004 / 2 ~ 1e-7, GLPK's floating-point tolerance.
  std::vector<double> angles = {0.3, 0.3 + delta, 0.296, 0.304 + delta};
  for (int i = 0; i < 40; ++i) angles.push_back(0.5 + 0.14 * i);  // up to 0.5 + 5.46 < 0.3 + 2 pi
  Matrix K(static_cast<Eigen::Index>(angles.size()), 3);
  for (Eigen::Index i = 0; i < K.rows(); ++i)
    K.row(i) = R * (std::cos(angles[static_cast<std::size_t>(i)]) * u + std::sin(angles[static_cast<std::size_t>(i)]) * v).transpose();
  const KeySelectability ex = analyse_keys(K, kSelectabilityRtol, false, true);
  CHECK(ex.unselectable_count() == 0);
  CHECK(ex.margin(0) > 0.0);
  CHECK(ex.margin(0) < 1e-6);
  CHECK(ex.margin(1) < 1e-6);
  // Exact mode keeps rounding-level protrusions on the hull: in d = 2 LayerNorm with eps = 0 maps
  // every key to +-(1, -1) (up to the last bit), so every key has a duplicate and none is
  // selectable. (With eps > 0 the radii differ and the outermost key on each side is selectable.)
  Matrix K2 = gaussian_keys(12, 2, 20240527, 2);
  Matrix K2eps = K2;
  normalize_rows(K2, Normalization(NormType::layernorm, 2, 0.0));
  CHECK(analyse_keys(K2, kSelectabilityRtol, false, true).unselectable_count() == 12);
  normalize_rows(K2eps, Normalization(NormType::layernorm, 2, 1e-5));
  CHECK(analyse_keys(K2eps, kSelectabilityRtol, false, true).unselectable_count() == 10);
  // On clean data both modes agree with the hand-worked answers.
  const Matrix T = keys2({{0, 0}, {4, 0}, {0, 4}, {1, 1}, {2, 0}});
  CHECK(analyse_keys(T, kSelectabilityRtol, false, true).selectable == std::vector<std::uint8_t>{1, 1, 1, 0, 0});
}

TEST_CASE("the heat map does not depend on the thread count", "[keys][glpk]") {
  BrodyMapSpec spec;
  spec.count_min = 5;
  spec.count_max = 14;
  spec.dim_min = 3;
  spec.dim_max = 5;
  spec.draws = 4;
  spec.threads = 1;
  const BrodyMap one = brody_map(spec);
  spec.threads = 2;
  const BrodyMap two = brody_map(spec);
  for (std::size_t k = 0; k < spec.norms.size(); ++k) {
    CHECK(one.unselectable_fraction[k] == two.unselectable_fraction[k]);
    CHECK(one.any_unselectable_fraction[k] == two.any_unselectable_fraction[k]);
    CHECK(one.max_unselectable[k] == two.max_unselectable[k]);
  }
}
