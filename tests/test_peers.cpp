// Peer dynamics and measures (docs/science/peers.md): small cases worked by hand, properties of
// the random ensembles, configuration errors. The trajectories are checked against an
// independent NumPy implementation in tests/reference/check_peers_numpy.py.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>

#include "io/inputs.hpp"
#include "cli_support.hpp"
#include "config/config.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/model/random.hpp"
#include "kernel/measures/attention_products.hpp"
#include "kernel/measures/clusters.hpp"
#include "kernel/measures/collapse_norms.hpp"
#include "kernel/model/bilinear.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/ops/tangent_projection.hpp"
#include "kernel/ops/softmax.hpp"
#include "kernel/trial/simulation.hpp"

using namespace rcsim;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

TEST_CASE("pair density and cluster count worked by hand", "[peers][metrics]") {
  // a = (1,0), b = (2,0) (cos 1), c = (0,1), d = 0, e = (1,1) (cos 1/sqrt 2 with a, b and c).
  Matrix X(5, 2);
  X << 1, 0, 2, 0, 0, 1, 0, 0, 1, 1;
  // threshold 0.999: only a-b, both orders: 2 of 5 * 4 = 20 ordered pairs.
  CHECK_THAT(pair_density(X, 0.999), WithinAbs(2.0 / 20.0, 1e-15));
  // threshold 0.5: a-b, a-e, b-e, c-e: 8 of 20.
  CHECK_THAT(pair_density(X, 0.5), WithinAbs(8.0 / 20.0, 1e-15));
  // components: {a, b}, {c}, {d}, {e} at 0.999; {a, b, c, e}, {d} at 0.5; all alone at 1.
  CHECK(cluster_count(X, 0.999) == 4);
  CHECK(cluster_count(X, 0.5) == 2);
  CHECK(cluster_count(X, 1.0) == 5);
  CHECK(std::isnan(pair_density(X.topRows(1), 0.5)));
}

TEST_CASE("Dong et al.'s residual worked by hand", "[peers][metrics]") {
  // X = (0,0), (0,0), (3,0): mean (1,0), R = (-1,0), (-1,0), (2,0); ||R||_1 = 4 (column sums),
  // ||R||_inf = 2 (row sums): sqrt(8).
  Matrix X(3, 2);
  X << 0, 0, 0, 0, 3, 0;
  CHECK_THAT(dong_residual(X), WithinRel(std::sqrt(8.0), 1e-15));
  // ||X||_1 = 3 (column 0), ||X||_inf = 3 (row 2): composite norm 3.
  CHECK_THAT(composite_norm(X), WithinRel(3.0, 1e-15));
  // Identical tokens: no residual.
  Matrix Y = Matrix::Ones(4, 3);
  CHECK(dong_residual(Y) == 0.0);
}

TEST_CASE("effective rank worked by hand", "[peers][metrics]") {
  Vector s(3);
  s << 1, 1, 0;
  CHECK_THAT(effective_rank(s), WithinRel(2.0, 1e-15));
  Vector t(2);
  t << 3, 1;  // p = (3/4, 1/4): (4/3)^(3/4) 4^(1/4) = 4 / 3^(3/4)
  CHECK_THAT(effective_rank(t), WithinRel(4.0 / std::pow(3.0, 0.75), 1e-14));
  CHECK(effective_rank(Vector::Zero(3)) == 0.0);
}

TEST_CASE("ergodicity coefficient worked by hand", "[peers][metrics]") {
  Matrix P(2, 2);
  P << 1, 0, 0, 1;
  CHECK(ergodicity_coefficient(P) == 1.0);
  P << 0.5, 0.5, 0.5, 0.5;
  CHECK(ergodicity_coefficient(P) == 0.0);
  P << 0.7, 0.3, 0.2, 0.8;  // 1 - (min(.7,.2) + min(.3,.8)) = 0.5
  CHECK_THAT(ergodicity_coefficient(P), WithinAbs(0.5, 1e-15));
}

TEST_CASE("USA weights worked by hand", "[peers][attention]") {
  Matrix S(2, 2);
  S << 0, std::log(2.0), std::log(3.0), 0;
  MaskMatrix complete = MaskMatrix::Ones(2, 2), causal = MaskMatrix::Ones(2, 2);
  causal(0, 1) = 0;
  Matrix A = S;
  usa_weights(A, complete);  // exp(S) / N, N = 2
  CHECK_THAT(A(0, 0), WithinAbs(0.5, 1e-15));
  CHECK_THAT(A(0, 1), WithinAbs(1.0, 1e-15));
  CHECK_THAT(A(1, 0), WithinAbs(1.5, 1e-15));
  A = S;
  usa_weights(A, causal);
  CHECK(A(0, 1) == 0.0);
  CHECK_THAT(A(1, 0), WithinAbs(1.5, 1e-15));
}

TEST_CASE("USA weights normalised by e^-beta: exp(S - c) / N, and c = 0 bit for bit", "[peers][attention]") {
  Matrix S(2, 2);
  S << 2000.0, 2000.0 - std::log(2.0), 1990.0, 0.0;  // exp(2000) overflows; exp(S - 2000) does not
  MaskMatrix complete = MaskMatrix::Ones(2, 2);
  Matrix A = S;
  usa_weights(A, complete, 2000.0);
  CHECK_THAT(A(0, 0), WithinAbs(0.5, 1e-15));
  CHECK_THAT(A(0, 1), WithinRel(0.25, 1e-12));  // 2000 - ln 2 rounds to 2.3e-13
  CHECK_THAT(A(1, 0), WithinRel(0.5 * std::exp(-10.0), 1e-12));
  CHECK(A(1, 1) == 0.0);  // exp(-2000) / 2 underflows to 0
  Matrix B = S.array() - 2000.0, C = B;
  usa_weights(C, complete);  // default shift 0: exactly exp(S) / N
  for (Eigen::Index i = 0; i < 2; ++i)
    for (Eigen::Index j = 0; j < 2; ++j) CHECK(C(i, j) == std::exp(B(i, j)) * 0.5);
}

TEST_CASE("tangent projection worked by hand", "[peers][dynamics]") {
  Matrix X(2, 2), V(2, 2);
  X << 2, 0, 0, 0;
  V << 3, 4, 5, 6;
  project_tangent(X, V);
  CHECK(V(0, 0) == 0.0);
  CHECK(V(0, 1) == 4.0);
  CHECK(V(1, 0) == 5.0);  // zero token: nothing removed
  CHECK(V(1, 1) == 6.0);
}

TEST_CASE("bilinear forms: symmetry and entry variances", "[peers][weights]") {
  const int d = 4, draws = 4000;
  RandomStream rng(7, 0);
  struct Expect {
    BilinearType type;
    bool symmetric;
    double var_diag, var_off;
  };
  // Variances from the definitions in bilinear.hpp: (G1 G2)_ij / sqrt(d) has variance d / d = 1;
  // (G + G^T)_ij / sqrt(2) has 1 off the diagonal, 4 / 2 = 2 on it; GOE divides those by d.
  for (const Expect e :
       {Expect{BilinearType::gaussian_product, false, 1.0, 1.0}, Expect{BilinearType::symmetric, true, 2.0, 1.0},
        Expect{BilinearType::goe, true, 2.0 / d, 1.0 / d}, Expect{BilinearType::wigner, true, 1.0, 1.0}}) {
    INFO("type " << to_string(e.type));
    double diag = 0, off = 0;
    Matrix B;
    for (int k = 0; k < draws; ++k) {
      draw_bilinear(e.type, d, rng, B);
      REQUIRE(B.rows() == d);
      if (e.symmetric) REQUIRE(B == B.transpose());
      diag += B.diagonal().squaredNorm();
      off += B.squaredNorm() - B.diagonal().squaredNorm();
    }
    // Relative standard error of a variance estimate from n samples: sqrt(2 / n) < 2% here.
    CHECK_THAT(diag / (draws * d), WithinRel(e.var_diag, 0.08));
    CHECK_THAT(off / (draws * d * (d - 1)), WithinRel(e.var_off, 0.08));
  }
  Matrix I;
  draw_bilinear(BilinearType::identity, 3, rng, I);
  CHECK(I == Matrix::Identity(3, 3));
  // Wishart G G^T / sqrt(d): symmetric, positive semidefinite, mean sqrt(d) I.
  Matrix V, mean = Matrix::Zero(d, d);
  for (int k = 0; k < draws; ++k) {
    draw_wishart(d, rng, V);
    REQUIRE(V == V.transpose());
    REQUIRE(V.selfadjointView<Eigen::Lower>().eigenvalues().minCoeff() > -1e-12);
    mean += V / draws;
  }
  CHECK_THAT(mean.diagonal().mean(), WithinRel(std::sqrt(double(d)), 0.05));
  CHECK_THAT((mean - mean.diagonal().asDiagonal().toDenseMatrix()).cwiseAbs().maxCoeff(), WithinAbs(0.0, 0.15));
}

TEST_CASE("weights.qk, tied_qk, redraw_every and across_trials in the sampler", "[peers][weights]") {
  std::map<std::string, std::string> v = {{"model.dim", "3"},       {"model.heads", "2"},
                                          {"weights.qk", "goe"},    {"weights.v", "tied_qk"},
                                          {"weights.v_sign", "-1"}, {"weights.redraw_every", "2"}};
  const Config c = make_config(v);
  const InputArrays files;
  WeightSampler sampler(c, files);
  RandomStream rng(c.run.seed, 0), replay(c.run.seed, 0);
  sampler.begin_trial(rng);
  const LayerWeights w0 = sampler.layer(0, rng);
  for (int h = 0; h < 2; ++h) {
    Matrix B;
    draw_bilinear(BilinearType::goe, 3, replay, B);  // the same stream, head by head
    CHECK(w0.q[static_cast<std::size_t>(h)] == B);
    CHECK(w0.k[static_cast<std::size_t>(h)] == Matrix::Identity(3, 3));
    CHECK(w0.v[static_cast<std::size_t>(h)] == -B);
  }
  const LayerWeights w1 = sampler.layer(1, rng);  // kept: layer 1 is not a multiple of 2
  CHECK(w1.q[0] == w0.q[0]);
  const LayerWeights w2 = sampler.layer(2, rng);  // redrawn
  CHECK(w2.q[0] != w0.q[0]);

  // across_trials = shared: every trial sees the same weights (and here the same X(0)).
  std::map<std::string, std::string> base = {
      {"model.tokens", "5"}, {"init.type", "fixed"}, {"init.matrix", "1 0 0 0; 0 1 0 0; 0 0 1 0; 0 0 0 1; 1 1 1 1"},
      {"run.trials", "3"},   {"model.layers", "4"},  {"norm.type", "sphere"}};
  base["weights.across_trials"] = "shared";
  const RunResults shared = run_simulation(prepare(make_config(base)), 1);
  CHECK(shared.token[0].row(0) == shared.token[0].row(1));
  CHECK(shared.token[0].row(0) == shared.token[0].row(2));
  base["weights.across_trials"] = "independent";
  const RunResults independent = run_simulation(prepare(make_config(base)), 1);
  CHECK(independent.token[0].row(0) != independent.token[0].row(1));
}

TEST_CASE("init.type = uniform: entries uniform on (-1, 1)", "[peers][inputs]") {
  const Config c = make_config({{"init.type", "uniform"}, {"model.tokens", "500"}, {"model.dim", "8"}});
  RandomStream rng(1, 0);
  const Matrix X = initial_tokens(c, InputArrays{}, 0, rng);
  CHECK(X.cwiseAbs().maxCoeff() < 1.0);
  // 4000 entries: mean 0 (sd 0.009), mean square 1/3 (sd 0.0047).
  CHECK_THAT(X.mean(), WithinAbs(0.0, 0.04));
  CHECK_THAT(X.squaredNorm() / X.size(), WithinAbs(1.0 / 3.0, 0.02));
}

TEST_CASE("model.beta and model.d_qk are one setting", "[peers][config]") {
  CHECK(make_config({{"model.beta", "0.5"}}).model.d_qk == 4.0);
  CHECK(make_config({{"model.d_qk", "4"}}).model.beta == 0.5);
  CHECK(make_config({{"model.beta", "0.5"}, {"model.d_qk", "4"}}).model.d_qk == 4.0);
  CHECK(make_config({}).model.beta == 0.5);  // d = 4: d_QK = d_k = 4
  CHECK_THROWS_AS(make_config({{"model.beta", "0.5"}, {"model.d_qk", "5"}}), UsageError);
  // The resolved text reads back to the same run; a derived beta is stored as auto, so a stored
  // configuration can be rerun with another d_QK.
  const Config c = make_config({{"model.beta", "3"}});
  std::map<std::string, std::string> again = c.values;
  CHECK(make_config(again).model.d_qk == c.model.d_qk);
  CHECK(make_config(again).to_ini() == c.to_ini());
  std::map<std::string, std::string> stored = make_config({{"model.d_qk", "0.1"}}).values;
  CHECK(stored.at("model.beta") == "auto");
  stored["model.d_qk"] = "9";
  CHECK(make_config(stored).model.beta == 1.0 / 3.0);
}

TEST_CASE("peer keys: bad values are usage errors", "[peers][config][cli]") {
  const std::string out = test::temp_path("rcsim_peers_bad.h5");
  auto args = [&](const std::string& kv) {
    return std::vector<std::string>{"run", "--config", "/dev/null", "--quiet", "--output.file=" + out, kv};
  };
  test::check_usage_errors(
      {args("--model.beta=0"),
       args("--model.beta=-1"),
       args("--attention.kind=linear"),
       args("--model.head_mix=max"),
       args("--residual.project=tangent"),
       args("--residual.project=normal"),
       args("--weights.qk=cauchy"),
       args("--weights.q=wishart"),
       args("--weights.k=tied_qk"),
       args("--weights.v_sign=2"),
       args("--weights.redraw_every=0"),
       args("--weights.across_trials=some"),
       args("--init.type=cube"),
       args("--output.measures=clusters,foo"),
       args("--output.measures=,"),
       args("--metrics.cluster_tau=x"),
       {"run", "--config", "/dev/null", "--quiet", "--output.file=" + out, "--model.key_dim=3", "--weights.qk=goe"},
       {"run", "--config", "/dev/null", "--quiet", "--output.file=" + out, "--weights.shared=true",
        "--weights.redraw_every=2"},
       {"run", "--config", "/dev/null", "--quiet", "--output.file=" + out, "--model.beta=1", "--model.d_qk=2"}},
      {out, out + ".tmp"});
}
