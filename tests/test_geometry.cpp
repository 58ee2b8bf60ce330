// The LayerNorm image (docs/science/model-spec.md 5.7; sim/geometry/layernorm_geometry.hpp) and the CLI of the geometry
// commands (exit codes in-process, like test_cli.cpp).
#include <catch2/catch.hpp>

#include "cli_support.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "cli/cli.hpp"
#include "io/hdf5_file.hpp"
#include "geometry/layernorm_geometry.hpp"
#include "geometry/selectability.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/model/random.hpp"

using namespace rcsim;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;
namespace fs = std::filesystem;

TEST_CASE("equal gains: a sphere of radius sqrt(d) |g| in the plane orthogonal to 1", "[geometry]") {
  const int d = GENERATE(2, 3, 5, 16);
  const double g = GENERATE(1.0, 2.5, -0.5);
  const LayerNormEllipsoid e = layernorm_ellipsoid(RowVector::Constant(d, g));
  REQUIRE(e.semi_axes.size() == d - 1);
  for (int k = 0; k < d - 1; ++k)
    CHECK_THAT(e.semi_axes(k), WithinRel(std::sqrt(static_cast<double>(d)) * std::abs(g), 1e-12));
  CHECK_THAT(std::abs(e.normal.sum()), WithinRel(std::sqrt(static_cast<double>(d)), 1e-12));  // normal = +-1/sqrt(d)
  CHECK_THAT(e.zero_eigenvalue, WithinAbs(0.0, 1e-12));
  CHECK((e.axes.transpose() * Vector::Ones(d)).cwiseAbs().maxCoeff() < 1e-12);
}

TEST_CASE("d = 2: the image is a segment with semi-axis ||g||", "[geometry]") {
  // alpha = (1/g1, 1/g2); the line orthogonal to it is spanned by v = (g1, -g2)/||g||, and
  // s^2 (v1^2/g1^2 + v2^2/g2^2) = 2 gives s = ||g|| (hand-worked).
  RowVector g(2);
  g << 0.7, -3.0;
  const LayerNormEllipsoid e = layernorm_ellipsoid(g);
  CHECK_THAT(e.semi_axes(0), WithinRel(g.norm(), 1e-12));
  CHECK_THAT(std::abs(e.axes(0, 0)), WithinRel(0.7 / g.norm(), 1e-12));
}

TEST_CASE("random gains: axes orthonormal in the plane, principal, with the stated lengths", "[geometry]") {
  const int d = GENERATE(3, 4, 7);
  RandomStream rng(11, static_cast<std::uint64_t>(d));
  RowVector g(d);
  for (int n = 0; n < d; ++n) g(n) = 0.3 + 2.0 * rng.uniform();
  const LayerNormEllipsoid e = layernorm_ellipsoid(g);
  const Matrix A = e.axes;
  CHECK((A.transpose() * A - Matrix::Identity(d - 1, d - 1)).cwiseAbs().maxCoeff() < 1e-12);
  CHECK((A.transpose() * e.normal).cwiseAbs().maxCoeff() < 1e-12);  // in the plane
  CHECK(std::is_sorted(e.semi_axes.data(), e.semi_axes.data() + d - 1, std::greater<double>()));
  const Vector inv_g2 = g.transpose().array().square().inverse().matrix();
  const Matrix P2 = Matrix::Identity(d, d) - e.normal * e.normal.transpose();
  for (int k = 0; k < d - 1; ++k) {
    const Vector v = A.col(k);
    // The end of the semi-axis lies on the ellipsoid y^T G^-2 y = d ...
    const Vector y = e.semi_axes(k) * v;
    CHECK_THAT(y.dot(inv_g2.asDiagonal() * y), WithinRel(static_cast<double>(d), 1e-12));
    // ... and v is a principal direction: the in-plane gradient of the quadratic form is along v.
    const Vector grad = P2 * (inv_g2.asDiagonal() * v);
    CHECK((grad - grad.dot(v) * v).norm() < 1e-12 * grad.norm());
  }
  // LayerNorm outputs with eps = 0 lie on the surface, with eps > 0 inside.
  Matrix X(200, d);
  rng.fill_normal(X);
  RowVector b = RowVector::LinSpaced(d, -1.0, 2.0);
  for (double eps : {0.0, 1e-3}) {
    const LayerNormSample s = sample_layernorm(e, g, b, eps, 500, 3, 1.0, 10);
    CHECK(s.plane_distance.maxCoeff() < 1e-12 * std::sqrt(static_cast<double>(d)) * g.cwiseAbs().maxCoeff());
    if (eps == 0.0)
      CHECK((s.radius.array() - 1.0).abs().maxCoeff() < 1e-12);
    else
      CHECK(s.radius.maxCoeff() < 1.0);
    CHECK(s.points.rows() == 10);
  }
}

TEST_CASE("the normalised radius follows the chi-square law and concentrates as eps shrinks", "[geometry]") {
  // For a ~ N(0, I_3), X = ||P a||^2 ~ chi^2_2 (exponential, mean 2) and rho^2 = X / (X + 3 eps):
  // P(rho <= r) = 1 - exp(-(3 eps / 2) r^2 / (1 - r^2)). Median for eps = 0.1:
  // r^2 / (1 - r^2) = ln 2 / 0.15, r = 0.906698 (hand-worked).
  RowVector g(3);
  g << 1.0, 2.0, 0.5;
  const LayerNormEllipsoid e = layernorm_ellipsoid(g);
  const RowVector b = RowVector::Zero(3);
  auto median = [](Vector r) {
    std::sort(r.data(), r.data() + r.size());
    return r(r.size() / 2);
  };
  const double q = std::log(2.0) / 0.15;
  CHECK_THAT(median(sample_layernorm(e, g, b, 0.1, 40000, 1, 1.0, 0).radius), WithinAbs(std::sqrt(q / (1 + q)), 0.005));
  double last = 0.0;
  for (double eps : {1e-1, 1e-3, 1e-5}) {
    const double m = median(sample_layernorm(e, g, b, eps, 20000, 1, 1.0, 0).radius);
    CHECK(m > last);
    last = m;
  }
  CHECK(last > 0.9999);
}

TEST_CASE("bad LayerNorm parameters are usage errors", "[geometry]") {
  CHECK_THROWS(layernorm_ellipsoid(RowVector::Constant(1, 1.0)));
  RowVector g(3);
  g << 1.0, 0.0, 2.0;
  CHECK_THROWS(layernorm_ellipsoid(g));
}

TEST_CASE("geometry commands: usage errors exit 2 and write nothing", "[geometry][cli]") {
  const std::string out = (fs::temp_directory_path() / "rcsim_geom_bad.h5").string();
  fs::remove(out);
  const std::vector<std::vector<std::string>> bad = {
      {"ln-geometry", "--norm.gain=0", "--output.file=" + out},
      {"ln-geometry", "--ln.dim=3", "--norm.gain=1 0 2", "--output.file=" + out},
      {"ln-geometry", "--ln.dim=1", "--output.file=" + out},
      {"ln-geometry", "--ln.dim=3", "--norm.gain=1 2", "--output.file=" + out},
      {"keys", "--keys.count=0", "--output.file=" + out},
      {"keys", "--keys.dim=0", "--output.file=" + out},
      {"keys", "--keys.dim=1", "--norm.type=layernorm", "--output.file=" + out},
      {"keys", "--keys.sauce=file", "--output.file=" + out},
      {"keys", "--keys.source=file", "--output.file=" + out},
      {"keys", "--keys.source=run", "--keys.file=/nonexistent.h5", "--output.file=" + out},
      {"keys", "--norm.type=batchnorm", "--output.file=" + out},
      {"brody-map", "--map.count_min=5", "--map.count_max=4", "--output.file=" + out},
      {"brody-map", "--map.dim_min=1", "--output.file=" + out},
      {"brody-map", "--map.norms=none,none", "--output.file=" + out},
      {"brody-map", "--map.draws=0", "--output.file=" + out},
      {"brody-example", "--example.magnitudes=1,-2", "--output.file=" + out},
      {"keys", "--config", "x.ini"},
  };
  test::check_usage_errors(bad, {out, out + ".tmp"});
}

TEST_CASE("geometry commands write complete files", "[geometry][cli][glpk]") {
  const fs::path dir = fs::temp_directory_path() / "rcsim_geom_ok";
  fs::remove_all(dir);
  const std::string keys = (dir / "keys.h5").string(), map = (dir / "map.h5").string(), ex = (dir / "ex.h5").string(),
                    ln = (dir / "ln.h5").string(), run = (dir / "run.h5").string();
  CHECK(cli_main({"keys", "--keys.count=9", "--keys.dim=2", "--output.file=" + keys, "--quiet"}) == 0);
  CHECK(cli_main({"brody-map", "--map.count_max=6", "--map.dim_max=4", "--map.draws=2", "--output.file=" + map,
                  "--quiet"}) == 0);
  CHECK(cli_main({"brody-example", "--example.angles=36", "--output.file=" + ex, "--quiet"}) == 0);
  CHECK(cli_main({"ln-geometry", "--norm.gain=1 2 0.5", "--ln.samples=100", "--ln.store=7", "--output.file=" + ln,
                  "--quiet"}) == 0);
  {
    const h5::File f = h5::File::open_read(keys);
    CHECK(f.attr_int("complete") == 1);
    CHECK(f.attr_string("filetype") == "rcsim-keys");
    CHECK(f.read("selectable").shape == std::vector<hsize_t>{9});
    CHECK(f.read("query").shape == std::vector<hsize_t>{9, 2});
  }
  {
    const h5::File f = h5::File::open_read(map);
    CHECK(f.read("layernorm/unselectable_fraction").shape == std::vector<hsize_t>{2, 4});  // [dim, count]
    CHECK(f.read("none/any_unselectable_fraction").shape == std::vector<hsize_t>{2, 4});
  }
  CHECK(h5::File::open_read(ex).read("weights").shape == std::vector<hsize_t>{2, 2, 4, 36, 4});
  {
    const h5::File f = h5::File::open_read(ln);
    CHECK(f.read("points").shape == std::vector<hsize_t>{3, 7, 3});
    CHECK(f.read("radius_quantiles").shape == std::vector<hsize_t>{3, 7});
    CHECK(f.read("axes").shape == std::vector<hsize_t>{3, 2});
  }
  // Keys from a run file's token snapshots.
  CHECK(cli_main({"run", "--config", "/dev/null", "--model.tokens=6", "--model.dim=3", "--model.layers=2",
                  "--run.trials=2", "--output.tokens=0,2", "--output.file=" + run, "--quiet"}) == 0);
  CHECK(cli_main({"keys", "--keys.source=run", "--keys.file=" + run, "--keys.trial=1", "--keys.layer=0", "--quiet"}) ==
        0);
  CHECK(cli_main({"keys", "--keys.source=run", "--keys.file=" + run, "--keys.layer=1", "--quiet"}) == 2);  // not stored
  CHECK(cli_main({"keys", "--keys.source=run", "--keys.file=" + run, "--keys.trial=2", "--quiet"}) == 2);
  CHECK(cli_main({"keys", "--keys.source=file", "--keys.file=" + keys, "--keys.dataset=keys_input", "--quiet"}) == 0);
  fs::remove_all(dir);
}

// GLPK is optional (-DRCSIM_GLPK): with it the LP decides a key inside a triangle; without it
// every LP entry point is one runtime error saying how to get it, and `rcsim keys` exits 1.
TEST_CASE("the selectability LP with GLPK, or one clear runtime error without it", "[geometry][cli]") {
  Matrix K(4, 2);
  K << 0, 0, 4, 0, 0, 4, 1, 1;  // key 3 inside the triangle of keys 0..2
#ifdef RCSIM_WITH_GLPK
  const KeySelectability s = analyse_keys(K);
  CHECK(s.selectable == std::vector<std::uint8_t>{1, 1, 1, 0});
  CHECK_FALSE(key_is_selectable(K, 3));
#else
  const std::string expected =
      "this rcsim was built without GLPK (GPL-3.0): the selectability LP needs it; install libglpk-dev and rebuild "
      "with -DRCSIM_GLPK=ON";
  CHECK_THROWS_WITH(analyse_keys(K), expected);
  CHECK_THROWS_WITH(key_is_selectable(K, 3), expected);
  CHECK_THROWS_AS(analyse_keys(K), RuntimeError);
  const std::string out = (fs::temp_directory_path() / "rcsim_no_glpk_keys.h5").string();
  fs::remove(out);
  CHECK(cli_main({"keys", "--keys.count=5", "--keys.dim=2", "--output.file=" + out, "--quiet"}) == 1);
  CHECK_FALSE(fs::exists(out));
#endif
}

// dyt and derf in the geometry commands (issue 37 follow-up): norm.alpha is read as `rcsim run`
// reads it, acts on the keys (g tanh(a k) + b with g = 1, b = 0) and is recorded; before, the key
// did not exist there and every dyt/derf map used a = 0.5.
TEST_CASE("keys and brody-map read norm.alpha for dyt and derf", "[geometry][cli][glpk]") {
  const fs::path dir = fs::temp_directory_path() / "rcsim_geom_alpha";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string keys = (dir / "keys.h5").string(), map = (dir / "map.h5").string();
  REQUIRE(cli_main({"keys", "--keys.count=7", "--keys.dim=3", "--norm.type=dyt", "--norm.alpha=2.5",
                    "--output.file=" + keys, "--quiet"}) == 0);
  {
    const h5::File f = h5::File::open_read(keys);
    CHECK(f.attr_double("norm_alpha") == 2.5);
    const h5::Array k0 = f.read("keys_input"), k = f.read("keys");
    REQUIRE(k.data.size() == k0.data.size());
    for (std::size_t i = 0; i < k.data.size(); ++i) CHECK_THAT(k.data[i], WithinAbs(std::tanh(2.5 * k0.data[i]), 1e-15));
  }
  REQUIRE(cli_main({"keys", "--keys.count=7", "--keys.dim=3", "--norm.type=derf", "--norm.alpha=0.25",
                    "--output.file=" + keys, "--force", "--quiet"}) == 0);
  {
    const h5::File f = h5::File::open_read(keys);
    const h5::Array k0 = f.read("keys_input"), k = f.read("keys");
    for (std::size_t i = 0; i < k.data.size(); ++i) CHECK_THAT(k.data[i], WithinAbs(std::erf(0.25 * k0.data[i]), 1e-15));
  }
  // Other normalisations: the file as before (no norm_alpha).
  REQUIRE(cli_main({"keys", "--keys.count=7", "--keys.dim=3", "--norm.type=layernorm", "--output.file=" + keys,
                    "--force", "--quiet"}) == 0);
  CHECK_FALSE(h5::File::open_read(keys).has_attr("norm_alpha"));
  REQUIRE(cli_main({"brody-map", "--map.count_max=4", "--map.dim_max=3", "--map.draws=2", "--map.norms=none,dyt",
                    "--norm.alpha=3", "--output.file=" + map, "--quiet"}) == 0);
  CHECK(h5::File::open_read(map).attr_double("norm_alpha") == 3.0);
  CHECK(cli_main({"keys", "--norm.type=dyt", "--norm.alpha=abc", "--quiet"}) == 2);
  CHECK(cli_main({"brody-map", "--map.norms=dyt", "--norm.alpha=nan", "--output.file=" + map, "--force", "--quiet"}) == 2);
  fs::remove_all(dir);
}
