// What is specific to the opencl platform (kernel/platform/platform_opencl.hpp, docs/dev/platforms.md):
// its device layouts (the rows kernel with 1 and 8 lanes, the split kernel) against the reference
// platform on one layer, its refusals, the device recorded in a run file, its environment settings.
// Its agreement with the reference in the default layout, the case worked by hand and whole runs,
// is the conformance body of every platform entry (tests/test_platform_conformance.cpp). CI runs
// it on the CPU through pocl (ctest label `opencl`); without an OpenCL device the device cases pass
// with a warning saying so. Relative error bounds: 1e-12 in float64, 1e-5 in float32.
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

}  // namespace

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
