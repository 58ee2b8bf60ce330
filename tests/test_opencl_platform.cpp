// The opencl platform (kernel/platform/platform_opencl.hpp, docs/dev/platforms.md) against a case worked by
// hand and against the reference platform (layer.cpp's N x N attention matrix): one layer on every
// range mask, and whole runs (transformer blocks, the particle flow) layer by layer. CI runs it on
// the CPU through pocl (ctest label `opencl`); without an OpenCL device the device cases pass with
// a warning saying so. Relative error bounds: 1e-12 in float64, 1e-5 in float32.
#include <catch2/catch.hpp>

#include <stdlib.h>  // setenv, unsetenv (POSIX)
#include <unistd.h>  // getpid

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "app/run.hpp"
#include "config/config.hpp"
#include "io/hdf5_file.hpp"
#include "io/inputs.hpp"
#include "platform_support.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/trial/platform_table.hpp"
#include "kernel/platform/platform_opencl.hpp"
#include "kernel/model/random.hpp"
#include "kernel/trial/simulation.hpp"

using namespace rcsim;
using rcsim::test::gaussian_weights;
using rcsim::test::rel_max;

namespace {

// Whether the device cases can run; if not, a warning naming why.
bool device_present() {
  if (!opencl_platform_built()) {
    WARN("skipped: this build has no opencl platform (CMake did not find OpenCL)");
    return false;
  }
  if (opencl_devices().empty()) {
    WARN("skipped: no OpenCL device (install pocl-opencl-icd for the CPU; clinfo -l lists the devices)");
    return false;
  }
  return true;
}



// The kernel's layout for the scope: RCSIM_OPENCL_KERNEL (rows: one work item per row, as on a
// CPU device; split: a row's keys dealt among a work-group's items, as on a GPU) and
// RCSIM_OPENCL_LANES for the rows kernel (1: as on a GPU, 8: as on a CPU).
struct Layout {
  Layout(const char* kernel, const char* lanes) {
    setenv("RCSIM_OPENCL_KERNEL", kernel, 1);
    setenv("RCSIM_OPENCL_LANES", lanes, 1);
  }
  ~Layout() {
    unsetenv("RCSIM_OPENCL_KERNEL");
    unsetenv("RCSIM_OPENCL_LANES");
  }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct MaskCase {
  std::string name;
  MaskMatrix mask;
};

std::vector<MaskCase> masks(int n) {
  return {{"complete", complete_mask(n)},
          {"causal", causal_mask(n)},
          {"sliding window 7", sliding_window_mask(n, 7)},
          {"uni-directional window 40", unidirectional_sliding_window_mask(n, 40)}};
}

RunResults run(std::map<std::string, std::string> keys, const std::string& platform) {
  keys["run.platform"] = platform;
  keys["run.trials"] = "1";
  keys["output.tokens"] = "all";
  keys["output.spectrum"] = "true";
  return run_simulation(prepare(make_config(keys)), 1);
}

// Every recorded layer of `got` against `want`: mu, the singular values and the tokens within
// `tol` relative (the singular values and tokens relative to their largest magnitude).
void check_layers(const RunResults& got, const RunResults& want, double tol) {
  std::size_t mu = 0;
  while (std::string(want.token_info.at(mu).name) != "mu") ++mu;
  REQUIRE(got.layer_index == want.layer_index);
  double worst = 0.0;
  for (std::size_t t = 0; t < want.layer_index.size(); ++t) {
    INFO("layer " << want.layer_index[t]);
    const auto col = static_cast<Eigen::Index>(t);
    const double a = got.token[mu](0, col), b = want.token[mu](0, col);
    CHECK(std::abs(a - b) <= tol * std::abs(b));
    const double sv = rel_max(got.spectrum[0].row(col), want.spectrum[0].row(col));
    const double tokens = rel_max(got.snapshots[0][t], want.snapshots[0][t]);
    CHECK(sv <= tol);
    CHECK(tokens <= tol);
    worst = std::max({worst, std::abs(a - b) / std::abs(b), sv, tokens});
  }
  for (std::size_t m = 0; m < want.attention.size(); ++m) {  // the attention statistics (smallest weight, entropy)
    INFO(want.attention_info[m].name);
    const Matrix& a = got.attention[m];
    const Matrix& b = want.attention[m];
    CHECK(((a - b).cwiseAbs().array() <= tol * b.cwiseAbs().array()).all());
  }
  INFO("worst relative error over the layers " << worst);
  CHECK(worst <= tol);
}

}  // namespace

TEST_CASE("opencl: three tokens worked by hand", "[opencl]") {
  if (!device_present()) return;
  INFO("device " << opencl_device());
  // X rows (1, 0, 0), (0, 1, 0), (1, 1, 0); W_Q = W_K = W_V = I, d_QK = 1: S = X X^T, Y = softmax(S) X.
  // (d = 3 as in the other cases: one OpenCL program per precision and dimension, each compiled once.)
  Matrix X(3, 3);
  X << 1, 0, 0, 0, 1, 0, 1, 1, 0;
  LayerWeights w;
  w.q = w.k = w.v = {Matrix::Identity(3, 3)};
  const double e = std::exp(1.0), e2 = std::exp(2.0);
  Matrix Y;
  const AttentionStats s = opencl_attention(X, w, 1.0, analyse_rows(complete_mask(3)), Y);
  const double y2 = (e + e2) / (2 * e + e2);  // row 2: logits (1, 1, 2)
  CHECK(std::abs(Y(2, 0) - y2) < 1e-15);
  CHECK(std::abs(Y(2, 1) - y2) < 1e-15);
  CHECK(Y(2, 2) == 0.0);
  CHECK(std::abs(s.min_weight - 1.0 / (2 * e + 1)) < 1e-15);  // row 0: logits (1, 0, 1)
  // Entropies: row 0 weights (e, 1, e) / (2e + 1), row 1 the same mirrored, row 2 (e, e, e^2) / (2e + e^2).
  const auto H = [](std::vector<double> a) {
    double sum = 0, h = 0;
    for (double x : a) sum += x;
    for (double x : a) h -= x / sum * std::log(x / sum);
    return h;
  };
  CHECK(std::abs(s.mean_entropy - (2 * H({e, 1, e}) + H({e, e, e2})) / 3) < 1e-15);
  opencl_attention(X, w, 1.0, analyse_rows(causal_mask(3)), Y);
  CHECK(Y.row(0) == X.row(0));  // token 0 attends only to itself: exactly x_0
  CHECK(std::abs(Y(1, 0) - 1.0 / (1 + e)) < 1e-15);
  CHECK(std::abs(Y(1, 1) - e / (1 + e)) < 1e-15);
}

TEST_CASE("opencl: one layer equals the reference on every range mask, heads 1-3, W_O, float64 and float32",
          "[opencl]") {
  if (!device_present()) return;
  // N = 300: work-groups of 64 rows (the last one partial), tiles of keys whose edges fall inside
  // the masks' ranges; residual 0.5 and the sphere after the attention. The rows kernel with 1 lane
  // (as on a GPU) and 8 lanes (as on a CPU device), and the split kernel (its work-groups of 64
  // items deal out ranges of 1 to 300 keys: items with none, and merges of every shape).
  const auto [kernel, lanes] = GENERATE(std::make_pair("rows", "1"), std::make_pair("rows", "8"),
                                        std::make_pair("split", "1"));
  const Layout set(kernel, lanes);
  INFO("RCSIM_OPENCL_KERNEL = " << kernel << ", RCSIM_OPENCL_LANES = " << lanes);
  const int n = 300, d = 3;
  RandomStream rng(7, 300);
  Matrix X(n, d);
  rng.fill_normal(X);
  const Normalization sphere(NormType::sphere, d);
  for (const auto& [heads, value_dim] : std::vector<std::pair<int, int>>{{1, 0}, {2, 0}, {3, 0}, {2, 3}}) {
    const LayerWeights w = gaussian_weights(d, heads, value_dim, rng);
    LayerWeightsT<float> wf;
    cast_weights(w, wf);
    for (const MaskCase& c : masks(n)) {
      INFO(c.name << ", heads " << heads << ", value_dim " << value_dim);
      LayerParams p{&c.mask, 2.0, 0.5, &sphere};
      LayerParams q = p;
      q.kernel = &opencl_attention_kernel();
      LayerWorkspace ws_ref(n, d, d), ws_cl(n, d, d);
      Matrix ref, cl;
      const LayerReport a = attention_layer(X, w, p, ws_ref, ref);
      const LayerReport b = attention_layer(X, w, q, ws_cl, cl);
      CHECK(rel_max(cl, ref) <= 1e-12);
      CHECK(std::abs(b.attention.min_weight - a.attention.min_weight) <= 1e-12 * a.attention.min_weight);
      CHECK(std::abs(b.attention.mean_entropy - a.attention.mean_entropy) <= 1e-12 * a.attention.mean_entropy);
      CHECK(ws_cl.S_rows.size() == 0);  // no N x N matrix on the host
      LayerWorkspaceT<float> wsf_ref(n, d, d), wsf_cl(n, d, d);
      MatrixF ref32, cl32;
      const MatrixF Xf = X.cast<float>();
      attention_layer(Xf, wf, p, wsf_ref, ref32);
      attention_layer(Xf, wf, q, wsf_cl, cl32);
      CHECK(rel_max(cl32.cast<double>(), ref32.cast<double>()) <= 1e-5);
    }
  }
}

TEST_CASE("opencl: whole runs equal the reference layer by layer (mu, singular values, tokens)", "[opencl]") {
  if (!device_present()) return;
  // Depths where the dynamics are not chaotic: transformer stacks of 6 blocks (random weights drawn
  // per layer, N = 96, d = 3) and the particle flow (Q = K = V = I, beta = 4, dt = 0.1, 20 RK4
  // steps, N = 160, d = 3: clusters forming, no near-ties of distant tokens; also Euler with noise).
  const std::map<std::string, std::string> stack = {{"model.tokens", "96"}, {"model.dim", "3"}, {"model.layers", "6"}};
  std::map<std::string, std::string> flow = {
      {"model.tokens", "160"},     {"model.dim", "3"},          {"model.layers", "20"},
      {"weights.q", "identity"},   {"weights.k", "identity"},   {"weights.v", "identity"},
      {"weights.shared", "true"},  {"model.beta", "4"},         {"norm.type", "sphere"},
      {"residual.alpha", "0.1"},   {"residual.project", "tangent"}, {"dynamics.integrator", "rk4"},
      {"init.type", "sphere"}};
  struct Case {
    std::string name;
    std::map<std::string, std::string> keys;
  };
  std::vector<Case> cases = {
      {"post-LayerNorm, complete, 1 head",
       {{"norm.type", "layernorm"}, {"norm.position", "post"}, {"residual.alpha", "1"}}},
      {"pre-LayerNorm, causal, 3 heads, W_O, MLP",
       {{"norm.type", "layernorm"}, {"norm.position", "pre"}, {"residual.alpha", "1"}, {"mask.type", "causal"},
        {"model.heads", "3"}, {"model.value_dim", "2"}, {"mlp.width", "8"}}},
      {"pre-LayerNorm, causal, 4 heads sharing 2 key/value heads (model.kv_heads), W_O",
       {{"norm.type", "layernorm"}, {"norm.position", "pre"}, {"residual.alpha", "1"}, {"mask.type", "causal"},
        {"model.heads", "4"}, {"model.kv_heads", "2"}, {"model.value_dim", "2"}}},
      {"post-RMSNorm, sliding window 5, 2 heads",
       {{"norm.type", "rmsnorm"}, {"mask.type", "sliding_window"}, {"mask.window", "5"}, {"model.heads", "2"},
        {"residual.alpha", "1"}}},
      {"pre-LayerNorm, uni-directional window 9, 2 heads",
       {{"norm.type", "layernorm"}, {"norm.position", "pre"}, {"mask.type", "unidirectional_sliding_window"},
        {"mask.window", "9"}, {"model.heads", "2"}, {"residual.alpha", "1"}}},
  };
  for (Case& c : cases) c.keys.insert(stack.begin(), stack.end());
  cases.push_back({"particle flow, RK4, tangent, sphere, complete", flow});
  flow["mask.type"] = "causal";
  cases.push_back({"particle flow, RK4, tangent, sphere, causal", flow});
  flow["dynamics.integrator"] = "euler";
  flow["dynamics.noise"] = "0.1";  // the noisy transformer: host-side draws, the same on every platform
  cases.push_back({"particle flow, Euler, tangent, sphere, noise 0.1, causal", flow});
  for (const Case& c : cases) {
    for (const char* precision : {"float64", "float32"}) {
      std::map<std::string, std::string> keys = c.keys;
      keys["run.precision"] = precision;
      const RunResults ref = run(keys, "reference");
      for (const char* kernel : {"rows", "split"}) {  // the CPU device's layout, and the GPU's
        INFO(c.name << ", " << precision << ", kernel " << kernel);
        const Layout set(kernel, "8");
        const RunResults cl = run(keys, "opencl");
        check_layers(cl, ref, std::string(precision) == "float64" ? 1e-12 : 1e-5);
      }
    }
  }
}

TEST_CASE("dyt and derf: no platform refuses them, cpu and opencl equal the reference", "[opencl]") {
  // The normalisations run on the host on every platform (only the attention is fused or offloaded).
  for (const char* norm : {"dyt", "derf"}) {
    const std::map<std::string, std::string> keys = {
        {"model.tokens", "96"}, {"model.dim", "3"},     {"model.layers", "6"},    {"norm.type", norm},
        {"norm.alpha", "0.8"},  {"norm.position", "pre"}, {"residual.alpha", "1"}, {"mask.type", "causal"},
        {"mlp.width", "8"}};
    INFO(norm);
    CHECK(cpu_platform_refusal(make_config(keys)).empty());
    CHECK(opencl_platform_refusal(make_config(keys)).empty());
    const RunResults ref = run(keys, "reference");
    check_layers(run(keys, "cpu"), ref, 1e-12);
    if (device_present()) check_layers(run(keys, "opencl"), ref, 1e-12);
  }
}

TEST_CASE("run.platform = opencl: refused where it does not cover the run, never picked by auto", "[opencl]") {
  ModelSpec c;
  c.run.platform = Platform::opencl;
  c.model.tokens = 8;
  if (!opencl_platform_built()) {
    CHECK_THROWS_WITH(resolved_platform(c), Catch::Contains("key 'run.platform' = opencl") &&
                                                Catch::Contains("no opencl platform"));
    return;
  }
  CHECK(resolved_platform(c) == Platform::opencl);
  CHECK(opencl_platform_refusal(c).empty());
  c.attention.kind = AttentionKind::usa;
  CHECK_THROWS_WITH(resolved_platform(c), Catch::Equals(
                                              "key 'run.platform' = opencl: the opencl platform does not cover "
                                              "attention.kind (not softmax); use run.platform = reference (or auto, "
                                              "which picks the platform that covers the run)"));
  c.attention.kind = AttentionKind::softmax;
  c.output.attention = true;
  CHECK_THROWS_WITH(resolved_platform(c), Catch::Contains("opencl") && Catch::Contains("output.attention = true"));
  c.output.attention = false;
  c.mask.type = MaskType::custom;
  CHECK_THROWS_WITH(resolved_platform(c), Catch::Contains("opencl") && Catch::Contains("mask.type = custom"));
  // auto never picks opencl (it keeps every result of the cpu and reference platforms).
  c.mask.type = MaskType::complete;
  c.run.platform = Platform::automatic;
  for (const int tokens : {8, kCpuPlatformFromTokens, 100000}) {
    c.model.tokens = tokens;
    CHECK(resolved_platform(c) != Platform::opencl);
  }
}

TEST_CASE("run files record the threads inside a trial and, on opencl, the device that ran", "[opencl]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rcsim_opencl_attrs_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& platform, const std::string& threads, const std::string& trials) {
    const std::string file = (dir / (platform + ".h5")).string();
    run_to_file(make_config({{"run.platform", platform}, {"run.threads", threads}, {"run.trials", trials},
                             {"model.tokens", "40"}, {"model.dim", "3"}, {"model.layers", "2"},
                             {"output.file", file}}),
                {"test", 1}, nullptr, false);
    return h5::File::open_read(file);
  };
  {  // the cpu platform: run.threads = 2 on one trial, both inside it
    const h5::File f = write("cpu", "2", "1");
    CHECK(f.attr_string("platform") == "cpu");
    CHECK(f.attr_int("threads_per_trial") == 2);
    CHECK_FALSE(f.has_attr("opencl_device"));
    CHECK_FALSE(f.has_attr("opencl_batch"));
  }
  {  // the reference platform: one thread per trial, two trials on two workers
    const h5::File f = write("reference", "2", "2");
    CHECK(f.attr_int("threads") == 2);
    CHECK(f.attr_int("threads_per_trial") == 1);
    CHECK_FALSE(f.has_attr("opencl_device"));
  }
  if (device_present()) {  // three trials: one batch of three workers, one host thread each
    const h5::File f = write("opencl", "1", "3");
    const OpenclDeviceInfo device = opencl_device_info();
    CHECK(f.attr_string("platform") == "opencl");
    CHECK(f.attr_int("threads") == 3);
    CHECK(f.attr_int("opencl_batch") == 3);
    CHECK(f.attr_int("threads_per_trial") == 1);
    CHECK(f.attr_string("opencl_device") == device.name);
    CHECK(f.attr_string("opencl_vendor") == device.vendor);
    CHECK(f.attr_string("opencl_driver_version") == device.driver_version);
    CHECK(f.attr_int("opencl_compute_units") == device.compute_units);
    CHECK(device.compute_units >= 1);
    CHECK_FALSE(device.name.empty());
    CHECK(f.attr_string("opencl_kernel") == device.kernel);
    CHECK((device.kernel == "rows" || device.kernel == "split"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("opencl settings in the environment: a bad value is one message naming it", "[opencl]") {
  if (!device_present()) return;
  Matrix X = Matrix::Identity(3, 3), Y;
  LayerWeights w;
  w.q = w.k = w.v = {Matrix::Identity(3, 3)};
  const MaskRows rows = analyse_rows(complete_mask(3));
  const auto refused = [&](const char* name, const char* value, const std::string& allowed) {
    setenv(name, value, 1);
    CHECK_THROWS_AS(opencl_attention(X, w, 1.0, rows, Y), UsageError);
    CHECK_THROWS_WITH(opencl_attention(X, w, 1.0, rows, Y),
                      Catch::StartsWith(std::string(name) + " = '" + value + "': allowed " + allowed));
    unsetenv(name);
  };
  refused("RCSIM_OPENCL_KERNEL", "fast", "rows or split");
  refused("RCSIM_OPENCL_LANES", "4", "1 or 8");
  for (const char* value : {"0", "4097", "many"}) {
    setenv("RCSIM_OPENCL_BATCH", value, 1);
    CHECK_THROWS_WITH(opencl_batch_size(), Catch::StartsWith("RCSIM_OPENCL_BATCH = '" + std::string(value) +
                                                             "': allowed 1 to 4096"));
  }
  setenv("RCSIM_OPENCL_BATCH", "4096", 1);
  CHECK(opencl_batch_size() == 4096);
  unsetenv("RCSIM_OPENCL_BATCH");
  CHECK(opencl_batch_size() == 256);
  opencl_attention(X, w, 1.0, rows, Y);  // unset again: runs
  CHECK(std::abs(Y(0, 0) - std::exp(1.0) / (std::exp(1.0) + 2.0)) < 1e-15);
}
