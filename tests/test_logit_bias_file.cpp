// attention.logit_bias = file: an additive bias matrix B_h on the logits, read from weights.file's
// /logit_bias (or rcsim.simulate's weights={"logit_bias": B}) beside the binary mask
// (docs/science/gradients.md, "Attention biases"). Its adjoint is checked against FD in
// test_backward_attention.cpp ("additive logit biases ...").
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "config/config.hpp"
#include "kernel/model/host_arrays.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/trial/simulation.hpp"

using namespace rcsim;

namespace {

using Keys = std::map<std::string, std::string>;

// `blocks` (each N x N) stacked as an array of shape `shape` (C order).
NdArray stacked(const std::vector<Matrix>& blocks, std::vector<Extent> shape) {
  NdArray a;
  a.shape = std::move(shape);
  for (const Matrix& m : blocks)
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) a.data.push_back(m(i, j));
  return a;
}

RunResults run_with(const Keys& keys, std::optional<NdArray> bias) {
  const Config c = make_config(keys);
  const MaskMatrix mask = make_mask(c);
  std::map<std::string, NdArray> given;
  if (bias) given["logit_bias"] = *bias;
  return run_simulation(prepare(c, &mask, input_arrays_from(c, std::move(given), "test")), 1);
}

// The largest relative difference |a - b| / max(|b|, 1e-300) over every entry.
double worst_rel(const Matrix& a, const Matrix& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  return ((a - b).array().abs() / b.array().abs().max(1e-300)).maxCoeff();
}

// Every recorded measure and snapshot of `a` equal to `b`'s: bit for bit (tol = 0) or to `tol` relative.
void require_equal(const RunResults& a, const RunResults& b, double tol = 0.0) {
  REQUIRE(a.token.size() == b.token.size());
  for (std::size_t m = 0; m < a.token.size(); ++m) CHECK(worst_rel(a.token[m], b.token[m]) <= tol);
  for (std::size_t m = 0; m < a.attention.size(); ++m) CHECK(worst_rel(a.attention[m], b.attention[m]) <= tol);
  REQUIRE(a.snapshots.size() == b.snapshots.size());
  for (std::size_t t = 0; t < a.snapshots.size(); ++t)
    for (std::size_t l = 0; l < a.snapshots[t].size(); ++l) CHECK(worst_rel(a.snapshots[t][l], b.snapshots[t][l]) <= tol);
}

Keys base_keys(int heads, const std::string& precision = "float64") {
  return {{"model.tokens", "6"},    {"model.dim", "4"},          {"model.layers", "5"},
          {"model.heads", std::to_string(heads)},                {"mask.type", "causal"},
          {"norm.type", "layernorm"}, {"norm.position", "pre"},  {"residual.alpha", "1"},
          {"run.trials", "3"},      {"output.tokens", "all"},    {"run.precision", precision}};
}

}  // namespace

// ALiBi adds -m_h |i - j| to the logits as it computes it, so the compiler may fuse the product into the
// sum (-ffp-contract=fast); a file's B is that product already rounded. Bit for bit when no rounding
// can differ (one head: m = 2^-8 exact; float32: the product rounded to float before the sum),
// else to 1e-12.
TEST_CASE("logit bias from a file: B equal to ALiBi's matrix gives ALiBi's run", "[variants][logit_bias]") {
  for (const std::string precision : {"float64", "float32"})
    for (const int H : {1, 3}) {
      INFO(precision << " heads " << H);
      const int N = 6;
      std::vector<Matrix> B;
      for (int h = 0; h < H; ++h) {
        Matrix b = Matrix::Zero(N, N);
        add_logit_bias(b, LogitBias{LogitBiasKind::alibi, 1.0}, static_cast<std::size_t>(h), static_cast<std::size_t>(H));
        B.push_back(b);
      }
      Keys alibi = base_keys(H, precision);
      alibi["attention.logit_bias"] = "alibi";
      Keys file = base_keys(H, precision);
      file["attention.logit_bias"] = "file";
      file["weights.file"] = "<arrays>";
      const std::vector<Extent> shape =
          H == 1 ? std::vector<Extent>{N, N} : std::vector<Extent>{static_cast<Extent>(H), N, N};
      const RunResults want = run_with(alibi, std::nullopt);
      const RunResults got = run_with(file, stacked(B, shape));
      require_equal(got, want, H == 1 || precision == "float32" ? 0.0 : 1e-12);
      // The same bias given per layer [L, (H,) N, N] (every layer alike) is the same run.
      std::vector<Matrix> per_layer;
      for (int l = 0; l < 5; ++l) per_layer.insert(per_layer.end(), B.begin(), B.end());
      std::vector<Extent> layered = shape;
      layered.insert(layered.begin(), 5);
      require_equal(run_with(file, stacked(per_layer, layered)), got);
      // The comparison can fail: halving one entry the mask allows changes the run.
      B[0](3, 1) *= 0.5;
      const RunResults changed = run_with(file, stacked(B, shape));
      CHECK(worst_rel(changed.token[0], want.token[0]) > 1e-6);
    }
}

TEST_CASE("logit bias from a file: attention softmax(B) on the mask by hand, masked entries exactly 0",
          "[variants][logit_bias]") {
  // W_Q = 0: the logits are B alone. Row 1 of softmax([0, log 3]) = [1/4, 3/4]; row 2 of
  // softmax([0, 0, log 2]) = [1/4, 1/4, 1/2]; the entries above the diagonal carry 40, forbidden
  // by the causal mask, and must come out exactly 0.
  Matrix B(3, 3);
  B << 0, 40, 40, 0, std::log(3.0), 40, 0, 0, std::log(2.0);
  const Keys keys = {{"model.tokens", "3"},     {"model.dim", "2"},        {"model.layers", "1"},
                     {"mask.type", "causal"},   {"norm.type", "none"},     {"weights.q", "zero"},
                     {"weights.v", "identity"}, {"run.trials", "1"},       {"output.attention", "true"},
                     {"output.tokens", "all"},  {"attention.logit_bias", "file"}, {"weights.file", "<arrays>"}};
  const RunResults r = run_with(keys, stacked({B}, {3, 3}));
  const Matrix& A = r.attention_matrices[0][0];
  Matrix want(3, 3);
  want << 1, 0, 0, 0.25, 0.75, 0, 0.25, 0.25, 0.5;
  for (int i = 0; i < 3; ++i) {
    CHECK(A.row(i).sum() == Approx(1.0).epsilon(1e-15));
    for (int j = 0; j < 3; ++j) {
      if (j > i)
        CHECK(A(i, j) == 0.0);
      else
        CHECK(A(i, j) == Approx(want(i, j)).epsilon(1e-15));
    }
  }
  // X(1) = A X(0) (identity W_V, no residual, no normalisation).
  const Matrix& X0 = r.snapshots[0][0];
  const Matrix& X1 = r.snapshots[0][1];
  const Matrix AX = want * X0;
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 2; ++k) CHECK(X1(i, k) == Approx(AX(i, k)).epsilon(1e-14));
}

TEST_CASE("logit bias from a file: entries the mask forbids change nothing, a row constant changes nothing",
          "[variants][logit_bias]") {
  const int N = 6;
  Matrix B(N, N);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) B(i, j) = std::sin(1.0 + i * 0.7 + j * 1.3);
  Keys keys = base_keys(1);
  keys["attention.logit_bias"] = "file";
  keys["weights.file"] = "<arrays>";
  const RunResults want = run_with(keys, stacked({B}, {N, N}));
  Matrix hidden = B;  // changed above the diagonal only: the causal mask forbids those entries
  for (int i = 0; i < N; ++i)
    for (int j = i + 1; j < N; ++j) hidden(i, j) = 1e6 * (j - i);
  require_equal(run_with(keys, stacked({hidden}, {N, N})), want);
  // B + c_i 1^T: softmax is shift-invariant per row, so the run agrees to rounding.
  Matrix shifted = B;
  for (int i = 0; i < N; ++i) shifted.row(i).array() += 3.0 * i - 2.0;
  const RunResults s = run_with(keys, stacked({shifted}, {N, N}));
  for (std::size_t m = 0; m < s.token.size(); ++m)
    for (Eigen::Index t = 0; t < s.token[m].rows(); ++t)
      for (Eigen::Index l = 0; l < s.token[m].cols(); ++l)
        CHECK(s.token[m](t, l) == Approx(want.token[m](t, l)).epsilon(1e-11).margin(1e-300));
}

TEST_CASE("logit bias from a file: bad shapes, values and keys stop with a message naming them",
          "[variants][logit_bias][keys]") {
  Keys keys = base_keys(2);
  keys["attention.logit_bias"] = "file";
  keys["weights.file"] = "<arrays>";
  const Matrix B = Matrix::Zero(6, 6);
  // H = 2 needs a head axis.
  CHECK_THROWS_WITH(run_with(keys, stacked({B}, {6, 6})),
                    Catch::Contains("/logit_bias") && Catch::Contains("[6, 6]") && Catch::Contains("[2, 6, 6]") &&
                        Catch::Contains("[5, 2, 6, 6]"));
  Matrix nan = Matrix::Zero(6, 6);
  nan(2, 1) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(run_with(keys, stacked({nan, B}, {2, 6, 6})),
                    Catch::Contains("logit_bias") && Catch::Contains("non-finite"));
  CHECK_THROWS_WITH(run_with(keys, std::nullopt), Catch::Contains("logit_bias"));  // the array is required
  Keys no_file = base_keys(1);
  no_file["attention.logit_bias"] = "file";
  CHECK_THROWS_WITH(make_config(no_file), Catch::Contains("weights.file") && Catch::Contains("attention.logit_bias"));
  no_file["weights.file"] = "<arrays>";
  no_file["attention.decay"] = "0.5";
  CHECK_THROWS_WITH(make_config(no_file), Catch::Contains("attention.decay"));
}
