// One conformance body for every entry of the platform table (kernel/trial/platform_table.hpp,
// docs/dev/platforms.md): a table of settings x every entry this build has x float64 and float32.
// The truth is the reference platform's general path on every mask (EngineSetup::general_path: the
// N x N logits, masked softmax and products of layer.cpp). Where an entry covers a setting, its
// whole run equals the truth, every recorded layer (the tokens, mu and every other token measure,
// the singular values, the attention statistics and measures) within 1e-12 relative in float64 and
// 1e-5 in float32; this holds the reference platform's own fast path (row ranges, folded
// W_Q W_K^T, triangular products) too. An entry with a kernel must really compute the layer with it
// (its refusal and the layer's kernel_applies agree). Where an entry does not cover a setting, it
// refuses the run with its one line, naming the setting from the table's refusal(c). A setting
// marked `every_platform` is softmax attention on a row-range mask: every entry must cover it (the
// seam's contract, attention_kernel.hpp), so an entry cannot pass by refusing all.
//
// Adding a platform is one row of platform_table(); nothing here names a platform. An entry this
// build lacks, or whose device this machine lacks (pocl-opencl-icd for opencl on the CPU), is
// skipped with a warning saying why.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "io/inputs.hpp"
#include "kernel/block/attention_kernel.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/model/mask_ranges.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/trial/platform_table.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/trial/trial.hpp"

using namespace rcsim;

namespace {

using Values = std::map<std::string, std::string>;

struct Setting {
  std::string name;
  Values keys;
  bool every_platform;  // softmax on a row-range mask: every entry covers it
};

Values with(Values base, const Values& more) {
  for (const auto& [k, v] : more) base[k] = v;
  return base;
}

// The settings: the masks (complete, causal, both sliding windows, a custom mask), heads 1 to 4,
// d_k 3 (the cpu kernel's row-by-row keys) and 12 (its products), W_O, shared key/value heads,
// every normalisation placement, the MLP, output dropout, the particle flow (RK4, Euler with
// noise), the attention statistics at N = 2048; and what the fused platforms leave to the
// reference (biases, logit biases, shaped attention, attention dropout, USA, the kept attention
// matrix: the reference's fast path on range masks, its general path on the custom mask).
std::vector<Setting> settings() {
  const Values stack = {{"model.dim", "3"}, {"model.layers", "3"}, {"residual.alpha", "1"}};
  const Values flow = {{"model.tokens", "160"},      {"model.dim", "3"},
                       {"model.layers", "10"},       {"weights.q", "identity"},
                       {"weights.k", "identity"},    {"weights.v", "identity"},
                       {"weights.shared", "true"},   {"model.beta", "4"},
                       {"norm.type", "sphere"},      {"residual.alpha", "0.1"},
                       {"residual.project", "tangent"}, {"init.type", "sphere"}};
  const Values statistics = {{"output.measures", "attn_max_weight,attn_sink,sink_rate,attn_received"}};
  return {
      {"post-LayerNorm, complete, 1 head, N = 300",
       with(stack, {{"model.tokens", "300"}, {"norm.type", "layernorm"}}), true},
      {"pre-LayerNorm, causal, 3 heads, W_O, MLP, output dropout",
       with(stack, {{"model.tokens", "96"}, {"norm.type", "layernorm"}, {"norm.position", "pre"},
                    {"mask.type", "causal"}, {"model.heads", "3"}, {"model.value_dim", "3"}, {"mlp.width", "8"},
                    {"dropout.output", "0.1"}}),
       true},
      {"pre-LayerNorm, causal, 4 heads sharing 2 key/value heads, W_O",
       with(stack, {{"model.tokens", "96"}, {"norm.type", "layernorm"}, {"norm.position", "pre"},
                    {"mask.type", "causal"}, {"model.heads", "4"}, {"model.kv_heads", "2"}, {"model.value_dim", "3"}}),
       true},
      {"post-RMSNorm, sliding window 7, 2 heads, d_k = 12, N = 1100",
       with(stack, {{"model.tokens", "1100"}, {"model.dim", "12"}, {"model.layers", "2"}, {"norm.type", "rmsnorm"},
                    {"mask.type", "sliding_window"}, {"mask.window", "7"}, {"model.heads", "2"}}),
       true},
      {"pre-DyT, uni-directional window 40, 2 heads, MLP",
       with(stack, {{"model.tokens", "300"}, {"norm.type", "dyt"}, {"norm.alpha", "0.8"}, {"norm.position", "pre"},
                    {"mask.type", "unidirectional_sliding_window"}, {"mask.window", "40"}, {"model.heads", "2"},
                    {"mlp.width", "8"}}),
       true},
      {"pre-Derf, causal, MLP", with(stack, {{"model.tokens", "96"}, {"norm.type", "derf"}, {"norm.alpha", "0.8"},
                                             {"norm.position", "pre"}, {"mask.type", "causal"}, {"mlp.width", "8"}}),
       true},
      {"particle flow, RK4, tangent, sphere, complete", with(flow, {{"dynamics.integrator", "rk4"}}), true},
      {"particle flow, Euler, tangent, sphere, noise 0.1, causal",
       with(flow, {{"dynamics.noise", "0.1"}, {"mask.type", "causal"}}), true},
      {"attention statistics, causal, d_k = 12, N = 2048",
       with(statistics, {{"model.tokens", "2048"}, {"model.dim", "12"}, {"model.layers", "1"},
                         {"mask.type", "causal"}, {"norm.type", "layernorm"}, {"residual.alpha", "1"}}),
       false},
      {"attention statistics, sliding window 9, 3 heads, N = 700",
       with(statistics, with(stack, {{"model.tokens", "700"}, {"mask.type", "sliding_window"}, {"mask.window", "9"},
                                     {"norm.type", "layernorm"}, {"model.heads", "3"}})),
       false},
      {"projection biases (attention.bias)", with(stack, {{"model.tokens", "40"}, {"attention.bias", "true"}}), false},
      {"ALiBi logit bias", with(stack, {{"model.tokens", "40"}, {"attention.logit_bias", "alibi"}}), false},
      {"attention dropout, causal", with(stack, {{"model.tokens", "40"}, {"dropout.attention", "0.2"},
                                                  {"mask.type", "causal"}}), false},
      {"shaped attention, sliding window 5, 2 heads",
       with(stack, {{"model.tokens", "40"}, {"attention.shape_a", "0.8"}, {"attention.shape_b", "0.3"},
                    {"attention.shape_c", "0.2"}, {"mask.type", "sliding_window"}, {"mask.window", "5"},
                    {"model.heads", "2"}}), false},
      {"USA attention, LayerNorm", with(stack, {{"model.tokens", "40"}, {"attention.kind", "usa"},
                                                 {"norm.type", "layernorm"}}), false},
      {"the attention matrix kept (output.attention), causal, 2 heads",
       with(stack, {{"model.tokens", "40"}, {"output.attention", "true"}, {"mask.type", "causal"},
                    {"model.heads", "2"}}), false},
      {"a custom mask (star, N = 3)",
       with(stack, {{"model.tokens", "3"}, {"mask.type", "custom"},
                    {"mask.file", RCSIM_SOURCE_DIR "/configs/masks/star3.h5"}}),
       false},
  };
}

Values run_keys(Values keys, const char* platform, const char* precision) {
  keys["run.platform"] = platform;
  keys["run.precision"] = precision;
  keys["run.trials"] = "1";
  keys["output.tokens"] = "all";
  keys["output.spectrum"] = "true";
  return keys;
}

// A measure (trials x layers) within `tol` of the reference entry by entry, relative to the entry
// (a measure that is 0, as degenerate_rows, exactly). A measure in the units of X (mu, sigma_min,
// ...) is known only to rounding times the tokens' scale (sigma_min is at the rounding level after
// LayerNorm's centring): relative to the larger of itself and |X(t)|_F (`scale`, one per entry).
void check_measure(const Matrix& got, const Matrix& want, const Matrix* scale, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(got.rows() == want.rows());
  REQUIRE(got.cols() == want.cols());
  for (Eigen::Index i = 0; i < want.rows(); ++i)
    for (Eigen::Index j = 0; j < want.cols(); ++j) {
      INFO("entry (" << i << ", " << j << "): " << got(i, j) << " against " << want(i, j));
      const double size = std::max(std::abs(want(i, j)), scale ? (*scale)(i, j) : 0.0);
      CHECK(std::abs(got(i, j) - want(i, j)) <= tol * size);
    }
}

// Tokens or singular values within `tol` relative to their largest magnitude.
void check_array(const Matrix& got, const Matrix& want, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(got.rows() == want.rows());
  REQUIRE(got.cols() == want.cols());
  const double error = (got - want).cwiseAbs().maxCoeff(), scale = want.cwiseAbs().maxCoeff();
  INFO("largest difference " << error << ", largest magnitude " << scale);
  CHECK(error <= tol * scale);
}

// Every recorded layer of `got` against `want`.
void check_runs(const RunResults& got, const RunResults& want, double tol) {
  REQUIRE(want.nonfinite_layer == std::vector<int>{-1});  // a setting whose run stays finite
  CHECK(got.nonfinite_layer == want.nonfinite_layer);
  REQUIRE(got.layer_index == want.layer_index);
  REQUIRE(got.token_info.size() == want.token_info.size());
  const Matrix* norm = nullptr;  // |X(t)|_F
  for (std::size_t m = 0; m < want.token.size(); ++m)
    if (std::string(want.token_info[m].name) == "fro_norm") norm = &want.token[m];
  REQUIRE(norm != nullptr);
  for (std::size_t m = 0; m < want.token.size(); ++m) {
    const bool units_of_x = std::string(want.token_info[m].units) == "same as X";
    check_measure(got.token[m], want.token[m], units_of_x ? norm : nullptr, tol, want.token_info[m].name);
  }
  REQUIRE(got.attention_info.size() == want.attention_info.size());
  for (std::size_t m = 0; m < want.attention.size(); ++m)
    check_measure(got.attention[m], want.attention[m], nullptr, tol, want.attention_info[m].name);
  for (std::size_t t = 0; t < want.attention_matrices.size(); ++t)
    for (std::size_t l = 0; l < want.attention_matrices[t].size(); ++l)
      check_array(got.attention_matrices[t][l], want.attention_matrices[t][l], tol, "attention matrix " + std::to_string(l));
  for (std::size_t t = 0; t < want.spectrum.size(); ++t) check_array(got.spectrum[t], want.spectrum[t], tol, "singular values");
  for (std::size_t l = 0; l < want.snapshots[0].size(); ++l)
    check_array(got.snapshots[0][l], want.snapshots[0][l], tol, "tokens at layer " + std::to_string(l));
}

// Whether the entry's own kernel computes the run's layers (an entry without one, the reference,
// computes them itself): the refusal of the table and the layer's kernel_applies
// (attention_kernel.hpp) must agree, or a covered run would silently fall back to the reference
// heads.
bool kernel_computes(const EngineSetup& s) {
  const Trial trial(s, 0);
  const LayerParams& p = trial.params().layer;
  return p.kernel == nullptr || kernel_applies(*p.kernel, p, s.config.attention_bias, s.rows);
}

// The truth: the run of `keys` on the reference platform's general path.
RunResults truth(const Values& keys, const char* precision) {
  EngineSetup s = prepare(make_config(run_keys(keys, "reference", precision)));
  s.general_path = true;
  return run_simulation(s, 1);
}

// Why this build or machine cannot run entry `e` ("" if it can).
std::string missing(const PlatformEntry& e) {
  if (!e.built()) return std::string("this build has no ") + e.name + " platform (" + e.absent + ")";
  return e.unavailable();
}

}  // namespace

TEST_CASE("platform conformance: every entry equals the general path or refuses in one line", "[platform]") {
  std::set<std::string> warned;
  for (const Setting& setting : settings()) {
    for (const char* precision : {"float64", "float32"}) {
      const double tol = std::string(precision) == "float64" ? 1e-12 : 1e-5;
      RunResults ref;
      bool ref_done = false;
      for (const PlatformEntry& e : platform_table()) {
        INFO(setting.name << ", " << precision << ", run.platform = " << e.name);
        if (const std::string why = missing(e); !why.empty()) {
          if (warned.insert(e.name).second) WARN("skipped: run.platform = " << e.name << ": " << why);
          continue;
        }
        Config c = make_config(run_keys(setting.keys, "reference", precision));
        c.run.platform = e.platform;
        if (!e.covers(c)) {
          CHECK_FALSE(setting.every_platform);
          const std::string line = std::string("key 'run.platform' = ") + e.name + ": the " + e.name +
                                   " platform does not cover " + e.refusal(c) +
                                   "; use run.platform = reference (or auto, which picks the platform that covers the run)";
          CHECK(line.find('\n') == std::string::npos);
          CHECK_THROWS_WITH(resolved_platform(c), Catch::Equals(line));
          continue;
        }
        const EngineSetup s = prepare(c);
        REQUIRE(s.platform == e.platform);
        CHECK(kernel_computes(s));
        if (!ref_done) {
          ref = truth(setting.keys, precision);
          ref_done = true;
        }
        check_runs(run_simulation(s, 1), ref, tol);
      }
    }
  }
}

TEST_CASE("platform conformance: three tokens worked by hand on every entry's kernel", "[platform]") {
  // X rows (1, 0, 0), (0, 1, 0), (1, 1, 0); W_Q = W_K = W_V = I, d_QK = 1: S = X X^T, Y = softmax(S) X.
  Matrix X(3, 3);
  X << 1, 0, 0, 0, 1, 0, 1, 1, 0;
  LayerWeights w;
  w.q = w.k = w.v = {Matrix::Identity(3, 3)};
  const double e = std::exp(1.0), e2 = std::exp(2.0);
  const auto H = [](std::vector<double> a) {  // the entropy of the weights a / sum(a)
    double sum = 0, h = 0;
    for (double x : a) sum += x;
    for (double x : a) h -= x / sum * std::log(x / sum);
    return h;
  };
  for (const PlatformEntry& entry : platform_table()) {
    if (entry.kernel() == nullptr) continue;  // the reference: tests/test_attention.cpp
    INFO("run.platform = " << entry.name);
    if (const std::string why = missing(entry); !why.empty()) {
      WARN("skipped: run.platform = " << entry.name << ": " << why);
      continue;
    }
    const AttentionKernel& k = *entry.kernel();
    Matrix Y;
    const AttentionStats s = k.attention(X, w, 1.0, analyse_rows(complete_mask(3)), 1, false, Y);
    const double y2 = (e + e2) / (2 * e + e2);  // row 2: logits (1, 1, 2)
    CHECK(std::abs(Y(2, 0) - y2) < 1e-15);
    CHECK(std::abs(Y(2, 1) - y2) < 1e-15);
    CHECK(Y(2, 2) == 0.0);
    CHECK(std::abs(s.min_weight - 1.0 / (2 * e + 1)) < 1e-15);  // row 0: logits (1, 0, 1)
    // Row 0's weights (e, 1, e) / (2e + 1), row 1's the same mirrored, row 2's (e, e, e^2) / (2e + e^2).
    CHECK(std::abs(s.mean_entropy - (2 * H({e, 1, e}) + H({e, e, e2})) / 3) < 1e-15);
    k.attention(X, w, 1.0, analyse_rows(causal_mask(3)), 1, false, Y);
    CHECK(Y.row(0) == X.row(0));  // token 0 attends only to itself: exactly x_0
    CHECK(std::abs(Y(1, 0) - 1.0 / (1 + e)) < 1e-15);
    CHECK(std::abs(Y(1, 1) - e / (1 + e)) < 1e-15);
  }
}
