// The Jacobian measures by reverse passes: Hutchinson's estimate of jacobian_log_fro2,
// jacobian_log_spec2, last_token_sensitivity and metrics.readout = last_token against dense FD Jacobians.
#include "backward_support.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

TEST_CASE("jacobian_log_fro2 and jacobian_log_fro2_full by Hutchinson's estimate (metrics.jacobian_probes) against the exact value",
          "[backward]") {
  // E ||J^T u||^2 = ||J||_F^2 for u ~ N(0, I): with K = 4000 probes the estimate's relative standard
  // deviation is at most sqrt(2 / K) = 2.2%; the check allows 10%. One probe is a different number.
  for (const std::string name : {"jacobian_log_fro2", "jacobian_log_fro2_full"}) {
  INFO(name);
  std::map<std::string, std::string> keys = {
      {"model.tokens", "6"},    {"model.dim", "4"},          {"model.layers", "2"}, {"norm.type", "layernorm"},
      {"norm.position", "pre"}, {"residual.alpha", "1"},     {"run.trials", "2"},
      {"output.measures", name}};
  const RunResults exact = run_simulation(prepare(make_config(keys)), 1);
  const auto jac = [&name](const RunResults& r) {  // the measure's row of trials x layers
    for (std::size_t i = 0; i < r.token_info.size(); ++i)
      if (r.token_info[i].name == name) return r.token[i];
    throw std::logic_error(name + " not recorded");
  };
  keys["metrics.jacobian_probes"] = "4000";
  const EngineSetup s = prepare(make_config(keys));
  const RunResults est = run_simulation(s, 1), est2 = run_simulation(s, 2);
  CHECK(jac(est).cwiseEqual(jac(est2)).all());  // its own stream: independent of the threads
  for (int trial = 0; trial < 2; ++trial)
    for (int t = 0; t < 2; ++t) {
      INFO("trial " << trial << " layer " << t);
      CHECK(std::abs(std::exp(jac(est)(trial, t) - jac(exact)(trial, t)) - 1) < 0.1);
    }
  double worst = 0.0;
  for (int trial = 0; trial < 2; ++trial)
    for (int t = 0; t < 2; ++t) worst = std::max(worst, std::abs(std::exp(jac(est)(trial, t) - jac(exact)(trial, t)) - 1));
  WARN(name << ": K = 4000 probes against the exact value, largest relative difference " << worst);
  // At t = L the Jacobian is I_N (x) R^T (readout) or I_{Nd} (full): ||J||_F^2 = N ||R||^2 or N d
  // exactly, estimated as mean ||u||^2 ||R||^2 or mean ||U||^2.
  CHECK(std::abs(std::exp(jac(est)(0, 2) - jac(exact)(0, 2)) - 1) < 0.1);
  if (name == "jacobian_log_fro2_full") CHECK(jac(exact)(0, 2) == Approx(std::log(24.0)).epsilon(1e-15));
  keys["metrics.jacobian_probes"] = "1";
  const RunResults one = run_simulation(prepare(make_config(keys)), 1);
  CHECK(jac(one)(0, 0) != jac(exact)(0, 0));
  }
}

// ---- jacobian_log_spec2 and last_token_sensitivity (issue 23, item 2) ----

namespace {

double largest_eigenvalue(const Matrix& symmetric) {
  return Eigen::SelfAdjointEigenSolver<Matrix>(symmetric, Eigen::EigenvaluesOnly).eigenvalues().maxCoeff();
}

}  // namespace

TEST_CASE("jacobian_log_spec2 against the dense FD Jacobian of the readout and not the trace of its Gram matrix",
          "[backward][jacobian]") {
  for (const std::string variant : {"causal pre-LN MLP", "post rmsnorm complete 2 heads"}) {
    INFO(variant);
    EngineRun e = small_engine(variant, 31);
    const int N = 4, L = std::stoi(e.keys["model.layers"]);
    EngineRun plain = e;  // the FD evaluations: the forward pass alone
    e.keys["output.measures"] = "jacobian_log_fro2,jacobian_log_spec2";
    const RunResults r = e.run();
    const Vector R = readout(make_config(e.keys), 0);
    // The dense Jacobian J = d(X(L) R)/dX(0), N x (N d): row i the FD gradient of output i.
    Matrix J(N, 4 * 3);
    for (int i = 0; i < N; ++i) {
      const Matrix g = fd_gradient(plain.X0, [&] { return (plain.run().snapshots[0].back() * R)(i); });
      J.row(i) = Eigen::Map<const RowVector>(g.data(), g.size());
    }
    const Matrix gram = J * J.transpose();
    const double spec2 = largest_eigenvalue(gram), fro2 = gram.trace();
    const Matrix& s = measure_matrix(r, "jacobian_log_spec2");
    const Matrix& f = measure_matrix(r, "jacobian_log_fro2");
    CHECK(std::abs(std::exp(s(0, 0)) / spec2 - 1) < kTol);
    CHECK(std::abs(std::exp(f(0, 0)) / fro2 - 1) < kTol);
    // The Gram matrix's trace (= ||J||_F^2) is far from its largest eigenvalue here: a spec2 computed
    // from the trace would miss by more than 1%.
    CHECK(fro2 / spec2 > 1.01);
    CHECK(std::abs(std::exp(s(0, 0)) / fro2 - 1) > 1e-2);
    // At t = L, J = I_N (x) R^T: ||J||_2^2 = ||R||^2 and ||J||_F^2 = N ||R||^2.
    CHECK(s(0, L) == Approx(std::log(R.squaredNorm())).epsilon(1e-14));
    CHECK(f(0, L) == Approx(std::log(N * R.squaredNorm())).epsilon(1e-14));
  }
}

TEST_CASE("jacobian_log_spec2 <= jacobian_log_fro2 <= log N + jacobian_log_spec2 at every layer", "[backward][jacobian]") {
  // ||J||_2^2 <= ||J||_F^2 <= rank(J) ||J||_2^2 <= N ||J||_2^2 (J has N rows); equality on the right at t = L.
  const std::vector<std::map<std::string, std::string>> variants = {
      {{"norm.type", "layernorm"}, {"norm.position", "pre"}, {"mask.type", "causal"}, {"mlp.width", "6"}},
      {{"norm.type", "rmsnorm"}, {"norm.position", "post"}, {"mask.type", "complete"}, {"model.heads", "2"}},
      {{"norm.type", "none"}, {"residual.alpha", "0.5"}, {"mask.type", "sliding_window"}, {"mask.window", "1"}},
      {{"norm.type", "layernorm"}, {"norm.position", "peri"}, {"attention.kind", "usa"}, {"mask.type", "causal"}}};
  int strict = 0;
  for (const auto& v : variants) {
    std::map<std::string, std::string> k = {{"model.tokens", "6"},
                                            {"model.dim", "3"},
                                            {"model.layers", "4"},
                                            {"run.trials", "3"},
                                            {"output.measures", "jacobian_log_fro2,jacobian_log_spec2"}};
    for (const auto& [key, value] : v) k[key] = value;
    INFO(k["norm.type"] << " " << k["mask.type"]);
    const RunResults r = run_simulation(prepare(make_config(k)), 1);
    const Matrix &s = measure_matrix(r, "jacobian_log_spec2"), &f = measure_matrix(r, "jacobian_log_fro2");
    REQUIRE(s.allFinite());
    for (int trial = 0; trial < 3; ++trial)
      for (int t = 0; t <= 4; ++t) {
        INFO("trial " << trial << " layer " << t);
        CHECK(s(trial, t) <= f(trial, t) + 1e-12);
        CHECK(f(trial, t) <= std::log(6.0) + s(trial, t) + 1e-12);
        strict += f(trial, t) - s(trial, t) > 1e-3;
      }
    for (int trial = 0; trial < 3; ++trial) CHECK(f(trial, 4) - s(trial, 4) == Approx(std::log(6.0)).epsilon(1e-13));
  }
  // Mostly apart by more than 1e-3 (measured: 44 of the 60 entries; a Jacobian close to rank one, as
  // when the tokens align, has its Frobenius norm close to its spectral norm).
  CHECK(strict >= 40);
}

TEST_CASE("jacobian_log_spec2: one set of reverse passes for both Jacobian measures, chunks of layers equal",
          "[backward][jacobian]") {
  std::map<std::string, std::string> k = {
      {"model.tokens", "5"},    {"model.dim", "3"},      {"model.layers", "5"},   {"norm.type", "layernorm"},
      {"norm.position", "pre"}, {"residual.alpha", "1"}, {"mask.type", "causal"}, {"mlp.width", "4"},
      {"run.trials", "2"},      {"output.measures", "jacobian_log_fro2,jacobian_log_spec2"}};
  EngineSetup s = prepare(make_config(k));
  CHECK(jacobian_chunk_layers(s.config) == 6);  // small: every recorded layer at once
  const RunResults both = run_simulation(s, 1);
  for (const int chunk : {1, 2, 4}) {
    INFO("chunks of " << chunk << " layers");
    s.jacobian_chunk = chunk;
    const RunResults r = run_simulation(s, 2);
    CHECK(measure_matrix(r, "jacobian_log_spec2").cwiseEqual(measure_matrix(both, "jacobian_log_spec2")).all());
    CHECK(measure_matrix(r, "jacobian_log_fro2").cwiseEqual(measure_matrix(both, "jacobian_log_fro2")).all());
  }
  k["output.measures"] = "jacobian_log_spec2";
  const RunResults spec = run_simulation(prepare(make_config(k)), 1);
  CHECK(measure_matrix(spec, "jacobian_log_spec2").cwiseEqual(measure_matrix(both, "jacobian_log_spec2")).all());
  k["output.measures"] = "jacobian_log_fro2";
  const RunResults fro = run_simulation(prepare(make_config(k)), 1);
  CHECK(measure_matrix(fro, "jacobian_log_fro2").cwiseEqual(measure_matrix(both, "jacobian_log_fro2")).all());
  // A schedule: the recorded layers' values are those of the full run.
  k["output.measures"] = "jacobian_log_spec2";
  k["output.schedule"] = "list:0 2 5";
  EngineSetup sched = prepare(make_config(k));
  sched.jacobian_chunk = 2;
  const RunResults part = run_simulation(sched, 1);
  const Matrix& full = measure_matrix(both, "jacobian_log_spec2");
  const Matrix& p = measure_matrix(part, "jacobian_log_spec2");
  REQUIRE(p.cols() == 3);
  for (int trial = 0; trial < 2; ++trial) {
    CHECK(p(trial, 0) == full(trial, 0));
    CHECK(p(trial, 1) == full(trial, 2));
    CHECK(p(trial, 2) == full(trial, 5));
  }
  // The chunk: the layers whose N x (N d) Jacobians fit kGradientStoreBytes (N = 128, d = 64: 8 MiB each).
  ModelSpec big = s.config;
  big.model.tokens = 128;
  big.model.dim = 64;
  big.model.layers = 100;
  CHECK(jacobian_chunk_layers(big) == 8);
  big.model.tokens = 1024;  // one layer alone is larger: still one at a time
  CHECK(jacobian_chunk_layers(big) == 1);
}

TEST_CASE("jacobian_log_spec2 with metrics.jacobian_probes > 0 is refused", "[backward][jacobian]") {
  std::map<std::string, std::string> k = {{"model.tokens", "4"},
                                          {"model.dim", "3"},
                                          {"model.layers", "2"},
                                          {"metrics.jacobian_probes", "8"},
                                          {"output.measures", "jacobian_log_fro2,jacobian_log_spec2"}};
  CHECK_THROWS_AS(prepare(make_config(k)), UsageError);
  CHECK_THROWS_WITH(prepare(make_config(k)), Catch::Matchers::Contains("jacobian_log_spec2") &&
                                                 Catch::Matchers::Contains("metrics.jacobian_probes = 8"));
  k["output.measures"] = "jacobian_log_fro2";  // Hutchinson's estimate of the Frobenius norm alone: allowed
  CHECK_NOTHROW(prepare(make_config(k)));
}

TEST_CASE("last_token_sensitivity against FD of the last token's output row", "[backward][last_token]") {
  for (const std::string variant : {"causal pre-LN MLP", "post rmsnorm complete 2 heads"}) {
    INFO(variant);
    EngineRun e = small_engine(variant, 41);
    const int N = 4, d = 3, L = std::stoi(e.keys["model.layers"]);
    EngineRun plain = e;
    e.keys["output.measures"] = "last_token_sensitivity";
    const RunResults r = e.run();
    const Matrix& m = measure_matrix(r, "last_token_sensitivity");
    REQUIRE(m.cols() == (L + 1) * N);
    // S_i(0)^2 = sum_k ||row i of d x_{N-1,k}(L) / dX(0)||^2, the gradients by FD.
    Vector fd2 = Vector::Zero(N);
    for (int k = 0; k < d; ++k)
      fd2 += fd_gradient(plain.X0, [&] { return plain.run().snapshots[0].back()(N - 1, k); }).rowwise().squaredNorm();
    const Vector fd = fd2.cwiseSqrt();
    const Vector got = m.block(0, 0, 1, N).transpose();
    CHECK((got - fd).norm() / fd.norm() < kTol);
    CHECK(fd.minCoeff() > 1e-3);  // every token reaches the last one here
    // The first token's sensitivity instead of the last's would not pass.
    Vector first2 = Vector::Zero(N);
    for (int k = 0; k < d; ++k)
      first2 += fd_gradient(plain.X0, [&] { return plain.run().snapshots[0].back()(0, k); }).rowwise().squaredNorm();
    CHECK((got - first2.cwiseSqrt()).norm() / fd.norm() > 1e-2);
    // At t = L, d x_{N-1}(L) / dX(L) selects row N-1: S_{N-1} = sqrt(d), the others 0.
    for (int i = 0; i < N; ++i) CHECK(m(0, L * N + i) == (i == N - 1 ? std::sqrt(3.0) : 0.0));
  }
}

TEST_CASE("last_token_sensitivity is exactly 0 outside the receptive field of a sliding-window mask",
          "[backward][last_token]") {
  // Block t -> t+1 moves information at most w tokens: x_{N-1}(L) depends on x_i(t) only for
  // N-1-i <= (L-t) w. Outside that, every adjoint entry is an exact 0; inside, S_i(t) > 0.
  struct Window {
    const char* type;
    int w, L;
  };
  for (const Window win : {Window{"sliding_window", 1, 3}, Window{"unidirectional_sliding_window", 2, 2},
                           Window{"sliding_window", 2, 1}}) {
    INFO(win.type << " w = " << win.w << " L = " << win.L);
    const int N = 9;
    const std::map<std::string, std::string> k = {
        {"model.tokens", "9"},         {"model.dim", "3"},         {"model.layers", std::to_string(win.L)},
        {"mask.type", win.type},       {"mask.window", std::to_string(win.w)},
        {"norm.type", "layernorm"},    {"norm.position", "pre"},   {"mlp.width", "5"},
        {"model.heads", "2"},          {"run.trials", "2"},        {"output.measures", "last_token_sensitivity"}};
    const RunResults r = run_simulation(prepare(make_config(k)), 1);
    const Matrix& m = measure_matrix(r, "last_token_sensitivity");
    REQUIRE(m.cols() == (win.L + 1) * N);
    int zeros = 0;
    for (int trial = 0; trial < 2; ++trial)
      for (int t = 0; t <= win.L; ++t)
        for (int i = 0; i < N; ++i) {
          INFO("trial " << trial << " layer " << t << " token " << i);
          const double s = m(trial, t * N + i);
          if (N - 1 - i > (win.L - t) * win.w) {
            CHECK(s == 0.0);
            ++zeros;
          } else {
            CHECK(s > 1e-8);
          }
        }
    CHECK(zeros > 0);
  }
  // The causal mask: the last token sees every token.
  const RunResults r = run_simulation(
      prepare(make_config({{"model.tokens", "9"}, {"model.dim", "3"}, {"model.layers", "2"}, {"mask.type", "causal"},
                           {"output.measures", "last_token_sensitivity"}})),
      1);
  CHECK(measure_matrix(r, "last_token_sensitivity").leftCols(9).minCoeff() > 0.0);
}

TEST_CASE("engine: metrics.readout = last_token, the gradient and Jacobian measures of x_N(L) R against FD",
          "[backward]") {
  RandomStream rng(23, 0);
  EngineRun e;
  e.X0 = gaussian(4, 3, rng);
  e.WQ = gaussian(3, 3, rng, 0.7);
  e.keys = {{"model.tokens", "4"},      {"model.dim", "3"},       {"model.layers", "2"},
            {"norm.type", "layernorm"}, {"norm.position", "pre"}, {"residual.alpha", "1"},
            {"mask.type", "causal"},    {"mlp.width", "5"},       {"run.trials", "1"},
            {"output.tokens", "all"},   {"metrics.readout", "last_token"},
            {"output.measures", "grad_x_norm,grad_wq_norm,jacobian_log_fro2,jacobian_log_spec2"}};
  const RunResults r = e.run();
  const Vector R = readout(make_config(e.keys), 0);
  const auto last_loss = [&] { return e.run().snapshots[0].back().row(3).dot(R); };  // x_N(L) R
  const Matrix gx = fd_gradient(e.X0, last_loss);
  CHECK(std::abs(EngineRun::value(r, "grad_x_norm", 0) / gx.norm() - 1) < kTol);
  {  // one block (the fixed W_Q serves every block, so FD in it sums the blocks' gradients)
    EngineRun one = e;
    one.keys["model.layers"] = "1";
    const Matrix gq = fd_gradient(one.WQ, [&] { return one.run().snapshots[0].back().row(3).dot(R); });
    CHECK(std::abs(EngineRun::value(one.run(), "grad_wq_norm", 0) / gq.norm() - 1) < kTol);
  }
  CHECK(EngineRun::value(r, "grad_x_norm", 2) == Approx(R.norm()).epsilon(1e-14));  // ||e_N R^T||
  // One output: J_t is the row dL/dX(t), so ||J_t||_2^2 = ||J_t||_F^2 = ||dL/dX(t)||^2.
  CHECK(std::abs(EngineRun::value(r, "jacobian_log_fro2", 0) - std::log(gx.squaredNorm())) < kTol);
  for (int t = 0; t <= 2; ++t) {
    const double g = EngineRun::value(r, "grad_x_norm", t);
    CHECK(EngineRun::value(r, "jacobian_log_fro2", t) == Approx(std::log(g * g)).epsilon(1e-13));
    CHECK(EngineRun::value(r, "jacobian_log_spec2", t) == Approx(std::log(g * g)).epsilon(1e-13));
  }
  // The check can fail: the all-token loss 1^T X(L) R has another gradient.
  const Matrix g_all = fd_gradient(e.X0, [&] { return e.loss(); });
  CHECK(std::abs(g_all.norm() / gx.norm() - 1) > 0.01);
  auto probes = e.keys;
  probes["metrics.jacobian_probes"] = "4";
  CHECK_THROWS_WITH(make_config(probes), Catch::Contains("metrics.jacobian_probes") && Catch::Contains("last_token"));
  auto bad = e.keys;
  bad["metrics.readout"] = "first_token";
  CHECK_THROWS_WITH(make_config(bad), Catch::Contains("metrics.readout") && Catch::Contains("all_tokens") &&
                                          Catch::Contains("last_token"));
}
