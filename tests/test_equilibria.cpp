// `rcsim equilibria` (sim/app/equilibria.hpp): classification of states, the N = d = 2 equilibria
// of docs/science/model-spec.md 5.5, and bad inputs.
#include <catch2/catch.hpp>

#include "cli_support.hpp"

#include <cmath>
#include <filesystem>

#include "cli/cli.hpp"
#include "config/config.hpp"
#include "app/equilibria.hpp"
#include "io/hdf5_file.hpp"

using namespace rcsim;
using Catch::Matchers::WithinAbs;
namespace fs = std::filesystem;
using test::temp_path;

namespace {

// Starting points X0 [S, N, d] in an HDF5 file for init.type = file.
std::string starts_file(const std::string& name, const std::vector<Matrix>& starts) {
  const std::string path = temp_path(name);
  std::vector<double> data;
  for (const Matrix& m : starts) {
    const RowMajorMatrix r = m;
    data.insert(data.end(), r.data(), r.data() + r.size());
  }
  const h5::File f = h5::File::create(path);
  f.write("X0", {starts.size(), static_cast<hsize_t>(starts[0].rows()), static_cast<hsize_t>(starts[0].cols())},
          data.data());
  return path;
}

std::map<std::string, std::string> config_2x2() {
  return {{"model.tokens", "2"},   {"model.dim", "2"},      {"model.layers", "5000"},
          {"mask.type", "causal"}, {"norm.type", "sphere"}, {"weights.q", "zero"},
          {"weights.k", "zero"},   {"weights.v", "fixed"},  {"weights.v_matrix", "0.5 1; 0 1"}};
}

const Equilibrium& reached(const EquilibriumSearch& s, std::size_t start) {
  REQUIRE(s.starts[start].equilibrium >= 0);
  return s.equilibria[static_cast<std::size_t>(s.starts[start].equilibrium)];
}
}  // namespace

TEST_CASE("token classes and rank of hand-made states", "[equilibria]") {
  Matrix X(3, 2);
  X << 0.6, 0.8, 0.6, 0.8, 0.6, 0.8;
  StateClass c = classify_state(X, 1e-6, 1e-8);
  CHECK(c.tokens == TokenClass::identical);
  CHECK(c.rank == 1);
  CHECK(c.clusters == 1);
  X.row(1) *= -1.0;
  c = classify_state(X, 1e-6, 1e-8);
  CHECK(c.tokens == TokenClass::antipodal);
  CHECK(c.rank == 1);
  CHECK(c.clusters == 2);
  X.row(2) << 1.0, 0.0;
  c = classify_state(X, 1e-6, 1e-8);
  CHECK(c.tokens == TokenClass::distinct);
  CHECK(c.rank == 2);
  CHECK(c.clusters == 3);
  X.row(2) << 0.6 + 1e-9, 0.8;  // within the match tolerance of token 0, but not rank-exact
  c = classify_state(X, 1e-6, 1e-8);
  CHECK(c.clusters == 2);
  CHECK(c.rank == 1);  // sigma_2 ~ 1e-9 < 1e-8 sigma_max
}

TEST_CASE("docs/science/model-spec.md 5.5: N = d = 2 equilibria A, B and the unstable boundary", "[equilibria]") {
  // Token 0 at (0, 1) (already at its equilibrium); token 1 at angles (degrees) in the first
  // quadrant (-> A = (0, 1)), the open third-quadrant arc (-> B = (-0.6, -0.8)), and at (-1, 0).
  const std::vector<double> angles = {30, 100, 181, 225, 269, 180};
  std::vector<Matrix> starts;
  for (double deg : angles) {
    Matrix X(2, 2);
    X << 0, 1, std::cos(deg * M_PI / 180), std::sin(deg * M_PI / 180);
    starts.push_back(X);
  }
  starts.back() << 0, 1, -1, 0;  // exactly (-1, 0)
  auto values = config_2x2();
  values["init.type"] = "file";
  values["init.file"] = starts_file("rcsim_eq_starts_2x2.h5", starts);
  values["run.trials"] = std::to_string(starts.size());
  const EquilibriumSearch s = find_equilibria(make_config(values), {});
  CHECK(s.unconverged == 0);
  for (std::size_t k = 0; k < 2; ++k) {
    const Equilibrium& A = reached(s, k);
    INFO("start angle " << angles[k]);
    CHECK_THAT(A.X(1, 0), WithinAbs(0.0, 1e-10));
    CHECK_THAT(A.X(1, 1), WithinAbs(1.0, 1e-10));
    CHECK(A.cls.rank == 1);
    CHECK(A.cls.tokens == TokenClass::identical);
    CHECK(A.stable);
  }
  for (std::size_t k = 2; k < 5; ++k) {
    const Equilibrium& B = reached(s, k);
    INFO("start angle " << angles[k]);
    CHECK_THAT(B.X(1, 0), WithinAbs(-0.6, 1e-10));
    CHECK_THAT(B.X(1, 1), WithinAbs(-0.8, 1e-10));
    CHECK(B.cls.rank == 2);
    CHECK(B.cls.tokens == TokenClass::distinct);
    CHECK(B.stable);
    CHECK(B.residual < 1e-12);
  }
  const Equilibrium& boundary = reached(s, 5);
  CHECK(s.starts[5].layers == 1);  // a fixed point from the start
  CHECK_THAT(boundary.X(1, 0), WithinAbs(-1.0, 1e-15));
  CHECK(boundary.cls.rank == 2);
  CHECK_FALSE(boundary.stable);
  CHECK(s.equilibria.size() == 3);
  CHECK(reached(s, 0).count == 2);
  CHECK(reached(s, 2).count == 3);
}

TEST_CASE("5.5 from random starts: four stable equilibria, (0, +-1) and +-B", "[equilibria]") {
  // From random X(0) on the sphere token 0 goes to (0, +-1) and token 1 to the same point or to
  // -+(0.6, 0.8): the map is odd (X -> -X), so the equilibria come in antipodal pairs.
  auto values = config_2x2();
  values["init.type"] = "sphere";
  values["run.trials"] = "200";
  const EquilibriumSearch s = find_equilibria(make_config(values), {});
  CHECK(s.unconverged == 0);
  REQUIRE(s.equilibria.size() == 4);
  int rank1 = 0, rank2 = 0;
  double full_rank_basin = 0;
  for (const Equilibrium& e : s.equilibria) {
    CHECK(e.stable);
    CHECK(e.residual < 1e-12);
    CHECK_THAT(std::abs(e.X(0, 1)), WithinAbs(1.0, 1e-12));
    if (e.cls.rank == 1) {
      ++rank1;
    } else {
      ++rank2;
      full_rank_basin += e.basin_fraction;
      CHECK_THAT(std::abs(e.X(1, 0)), WithinAbs(0.6, 1e-10));
      CHECK(e.X(1, 1) * e.X(0, 1) < 0);  // B is on the side opposite to token 0
    }
  }
  CHECK(rank1 == 2);
  CHECK(rank2 == 2);
  CHECK(full_rank_basin > 0.0);
}

TEST_CASE("equilibria: the output file and bad inputs", "[equilibria][cli]") {
  const std::string out = temp_path("rcsim_eq_cli.h5");
  fs::remove(out);
  const std::vector<std::vector<std::string>> bad = {
      {"equilibria", "--config", temp_path("rcsim_no_such_config.ini")},
      {"equilibria", "--config", "/dev/null", "--output.file=" + out},  // gaussian weights
      {"equilibria", "--config", "/dev/null", "--weights.q=zero", "--weights.k=zero", "--weights.v=orthogonal",
       "--output.file=" + out},
      {"equilibria", "--config", "/dev/null", "--weights.q=zero", "--weights.k=zero", "--weights.v=identity", "--tol=0",
       "--output.file=" + out},
      {"equilibria", "--config", "/dev/null", "--weights.q=zero", "--weights.k=zero", "--weights.v=identity",
       "--probes=1.5", "--output.file=" + out},
      {"equilibria", "--config", "/dev/null", "--weights.q=zero", "--weights.k=zero", "--weights.v=identity",
       "--perturbation=abc", "--output.file=" + out},
  };
  test::check_usage_errors(bad, {out});
  REQUIRE(cli_main({"equilibria", "--config", "/dev/null", "--model.tokens=2", "--model.dim=2", "--mask.type=causal",
                    "--norm.type=sphere", "--weights.q=zero", "--weights.k=zero", "--weights.v=fixed",
                    "--weights.v_matrix=0.5 1; 0 1", "--init.type=sphere", "--run.trials=20", "--model.layers=3000",
                    "--output.file=" + out, "--quiet"}) == 0);
  const h5::File f = h5::File::open_read(out);
  CHECK(f.attr_string("filetype") == "rcsim-equilibria");
  CHECK(f.attr_int("complete") == 1);
  CHECK(f.read("end_states").shape == std::vector<hsize_t>{20, 2, 2});
  const h5::Array frac = f.read("equilibria/basin_fraction");
  double total = 0;
  for (double x : frac.data) total += x;
  CHECK_THAT(total, WithinAbs(1.0, 1e-12));  // every start converged
}

namespace {
// The shipped configuration, with the mask file's path made absolute.
Config shipped_config(const std::string& name) {
  const std::string dir = RCSIM_SOURCE_DIR;
  ParsedArgs p = parse_config_sources({}, dir + "/configs/" + name);
  p.values["mask.file"] = dir + "/" + p.values["mask.file"];
  return make_config(p.values);
}

// One layer of the star-mask model written out independently of sim/kernel/block/layer.cpp:
// x_0 <- x_0 W / ||x_0 W||,  x_i <- (x_0 + x_i) W / ||(x_0 + x_i) W||.
Matrix star_layer(const Matrix& X, const Matrix& W) {
  Matrix Y(X.rows(), X.cols());
  Y.row(0) = X.row(0) * W;
  for (Eigen::Index i = 1; i < X.rows(); ++i) Y.row(i) = (X.row(0) + X.row(i)) / 2.0 * W;
  for (Eigen::Index i = 0; i < X.rows(); ++i) Y.row(i).normalize();
  return Y;
}
}  // namespace

TEST_CASE("rank-k equilibria coexist for N = d = 3 and 4 (docs/science/equilibria.md)", "[equilibria]") {
  const int n = GENERATE(3, 4);
  const Config c = shipped_config("equilibria_rank" + std::to_string(n) + ".ini");
  REQUIRE(c.model.tokens == n);
  const double mu = 0.2, beta = 1.0;
  Matrix W = Matrix::Zero(n, n);  // [[mu I, beta 1], [0, 1]], row convention
  for (int i = 0; i < n - 1; ++i) {
    W(i, i) = mu;
    W(i, n - 1) = beta;
  }
  W(n - 1, n - 1) = 1.0;
  REQUIRE((c.weights.v.matrix - W).norm() == 0.0);
  const EquilibriumSearch s = find_equilibria(c, {});
  CHECK(s.unconverged == 0);
  std::vector<int> reached(static_cast<std::size_t>(n + 1), 0);
  for (const Equilibrium& e : s.equilibria) {
    const Matrix& X = e.X;
    INFO("n = " << n << ", equilibrium\n" << X);
    // Independent fixed-point check.
    CHECK((star_layer(X, W) - X).norm() < 1e-10);
    // Token 0 is +-e_n; every other token is token 0 or on the family F: with s = sign of
    // token 0, x = s (w', -(1 + beta sum w') / (1 - mu)) with ||x|| = 1.
    const double sgn = X(0, n - 1) > 0 ? 1.0 : -1.0;
    CHECK(std::abs(std::abs(X(0, n - 1)) - 1.0) < 1e-12);
    int on_family = 0;
    for (int i = 1; i < n; ++i) {
      if ((X.row(i) - X.row(0)).norm() < 1e-9) continue;
      const RowVector x = sgn * X.row(i);
      const double sum = x.head(n - 1).sum();
      CHECK(std::abs(x(n - 1) + (1 + beta * sum) / (1 - mu)) < 1e-9);
      ++on_family;
    }
    // Rank exact: 1 + the number of tokens on F (distinct generic points), with a clear gap.
    const Vector sigma = Eigen::JacobiSVD<Matrix>(X).singularValues();
    const int k = e.cls.rank;
    CHECK(k == 1 + on_family);
    // Random starts can land two tokens close together on F, so sigma_k may be small; it must
    // still stand clear of the rank tolerance (1e-8) and of the round-off level below it.
    CHECK(sigma(k - 1) > 1e-7 * sigma(0));
    if (k < n) CHECK(sigma(k) < 1e-12 * sigma(0));
    CHECK(e.stable);
    ++reached[static_cast<std::size_t>(k)];
  }
  for (int k = 1; k <= n; ++k) {
    INFO("n = " << n << ": distinct equilibria of rank " << k << " reached from random starts");
    CHECK(reached[static_cast<std::size_t>(k)] >= 1);
  }
}

TEST_CASE("the equilibria table: first rows, '... N more rows', and the summary by rank and type", "[equilibria]") {
  // 100 starts: 25 distinct equilibria made by hand. Rank 1 identical stable: 1 equilibrium of
  // 60 end states; rank 2 distinct stable: 20 equilibria of 1 state each; rank 2 distinct
  // unstable: 4 of 2 each; 12 starts did not converge (60 + 20 + 8 + 12 = 100).
  EquilibriumSearch s;
  s.starts.resize(100);
  s.unconverged = 12;
  auto add = [&](int rank, TokenClass tokens, bool stable, int count) {
    Equilibrium e;
    e.X = Matrix::Zero(2, 2);
    e.cls.rank = rank;
    e.cls.tokens = tokens;
    e.stable = stable;
    e.count = count;
    e.basin_fraction = count / 100.0;
    s.equilibria.push_back(e);
  };
  add(1, TokenClass::identical, true, 60);
  for (int i = 0; i < 20; ++i) add(2, TokenClass::distinct, true, 1);
  for (int i = 0; i < 4; ++i) add(2, TokenClass::distinct, false, 2);
  const std::string summary = equilibria_summary(s);
  INFO(summary);
  CHECK(summary.find("summary: 25 distinct equilibria from 100 starts") != std::string::npos);
  // rank, tokens, stable, equilibria, end states, basin
  CHECK(summary.find("    1  identical     yes           1          60     60.0%") != std::string::npos);
  CHECK(summary.find("    2   distinct      no           4           8      8.0%") != std::string::npos);
  CHECK(summary.find("    2   distinct     yes          20          20     20.0%") != std::string::npos);
  CHECK(summary.find("unconverged") != std::string::npos);
  CHECK(summary.find("12     12.0%") != std::string::npos);
  const std::string shortened = equilibria_table(s), full = equilibria_table(s, true);
  CHECK(shortened.find("... 5 more rows (--verbose prints them") != std::string::npos);  // 25 - 20
  CHECK(full.find("more rows") == std::string::npos);
  CHECK(full.find("\n   24 ") != std::string::npos);       // the last row, with --verbose
  CHECK(shortened.find("\n   24 ") == std::string::npos);
  CHECK(shortened.find(summary) != std::string::npos);      // the summary follows the table
}
