// TrialBatch (kernel/trial/trial_batch.hpp): B = 1, 3 and 7 trials stepped together equal each trial
// stepped alone: bitwise on the reference and cpu platforms; on the opencl platform bitwise the
// opencl trial stepped alone (a batch computes each row with the same code) and within 1e-12
// (float64) / 1e-5 (float32) of the reference trial. On opencl a batch launches ONE kernel per
// round of attention calls (one per block, four per RK4 step), and a run whose trials are batched
// equals, bitwise, the run that launches one trial at a time (RCSIM_OPENCL_BATCH = 1).
#include <catch2/catch.hpp>

#include <stdlib.h>  // setenv, unsetenv (POSIX)

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "io/inputs.hpp"
#include "kernel/platform/platform_opencl.hpp"
#include "kernel/trial/platform_table.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/trial/trial_batch.hpp"
#include "platform_support.hpp"

using namespace rcsim;
using rcsim::test::rel_max;

namespace {

using Values = std::map<std::string, std::string>;

struct Setting {
  std::string name;
  Values keys;
  int calls_per_block;  // attention calls of one block (RK4: four)
  bool all_platforms;   // false: the reference only (dropout)
};

// Settings that draw from every stream a trial has (weights per layer, dropout, noise, float32
// rounding), a transformer stack on a range mask (2 heads, W_O, MLP) and the particle flow (RK4).
std::vector<Setting> settings() {
  return {
      {"sphere, noise 0.3, dropout",
       {{"model.tokens", "7"}, {"model.dim", "4"}, {"model.layers", "6"}, {"norm.type", "sphere"},
        {"residual.alpha", "0.5"}, {"dynamics.noise", "0.3"}, {"dropout.attention", "0.2"}, {"dropout.output", "0.1"}},
       1, false},
      {"pre-LayerNorm, sliding window 5, 2 heads, W_O, MLP",
       {{"model.tokens", "50"}, {"model.dim", "4"}, {"model.layers", "4"}, {"norm.type", "layernorm"},
        {"norm.position", "pre"}, {"residual.alpha", "1"}, {"mlp.width", "8"}, {"model.heads", "2"},
        {"model.value_dim", "3"}, {"mask.type", "sliding_window"}, {"mask.window", "5"}},
       1, true},
      {"particle flow, RK4, tangent, noise 0.1, causal",
       {{"model.tokens", "40"}, {"model.dim", "3"}, {"model.layers", "6"}, {"init.type", "sphere"},
        {"norm.type", "sphere"}, {"residual.alpha", "0.2"}, {"residual.project", "tangent"},
        {"weights.q", "identity"}, {"weights.k", "identity"}, {"weights.v", "identity"}, {"weights.shared", "true"},
        {"model.beta", "4"}, {"dynamics.integrator", "rk4"}, {"dynamics.noise", "0.1"}, {"mask.type", "causal"}},
       4, true},
  };
}

const std::vector<int> kTrials = {0, 3, 5, 8, 10, 13, 15};  // trials of a run of 16

EngineSetup setup(Values keys, const std::string& platform, const std::string& precision) {
  keys["run.platform"] = platform;
  keys["run.precision"] = precision;
  keys["run.trials"] = "16";
  return prepare(make_config(keys));
}

// X(0), ..., X(L) of the trial stepped alone.
std::vector<Matrix> alone(const EngineSetup& s, int trial) {
  Trial t(s, trial);
  std::vector<Matrix> X{t.tokens()};
  while (t.layer() < s.config.model.layers) {
    t.step();
    X.push_back(t.tokens());
  }
  return X;
}

// X(0), ..., X(L) of every trial of the batch: [b][t].
std::vector<std::vector<Matrix>> batched(TrialBatch& batch, int layers) {
  std::vector<std::vector<Matrix>> X(static_cast<std::size_t>(batch.size()));
  for (int b = 0; b < batch.size(); ++b) X[static_cast<std::size_t>(b)].push_back(batch[b].tokens());
  for (int t = 0; t < layers; ++t) {
    batch.step();
    for (int b = 0; b < batch.size(); ++b) X[static_cast<std::size_t>(b)].push_back(batch[b].tokens());
  }
  return X;
}

bool bitwise_equal(const Matrix& a, const Matrix& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && (a.array() == b.array()).all();
}

bool opencl_device_present() {
  if (!opencl_platform_built() || opencl_devices().empty()) {
    WARN("opencl cases skipped: no opencl platform or no OpenCL device");
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("trial batch: B = 1, 3, 7 trials equal the trials stepped alone, bitwise (reference, cpu)", "[trial]") {
  for (const Setting& c : settings()) {
    for (const char* platform : {"reference", "cpu"}) {
      if (!c.all_platforms && std::string(platform) != "reference") continue;
      for (const char* precision : {"float64", "float32"}) {
        const EngineSetup s = setup(c.keys, platform, precision);
        const int L = s.config.model.layers;
        for (const int B : {1, 3, 7}) {
          INFO(c.name << ", " << platform << ", " << precision << ", B = " << B);
          TrialBatch batch(s, std::vector<int>(kTrials.begin(), kTrials.begin() + B));
          const auto got = batched(batch, L);
          CHECK(batch.launches() == 0);
          for (int b = 0; b < B; ++b) {
            const auto want = alone(s, kTrials[static_cast<std::size_t>(b)]);
            for (int t = 0; t <= L; ++t) CHECK(bitwise_equal(got[static_cast<std::size_t>(b)][static_cast<std::size_t>(t)], want[static_cast<std::size_t>(t)]));
          }
        }
      }
    }
  }
}

TEST_CASE("trial batch on opencl: one launch per round, each trial bitwise alone and within 1e-12 / 1e-5 of the reference",
          "[opencl]") {
  if (!opencl_device_present()) return;
  for (const Setting& c : settings()) {
    if (!c.all_platforms) continue;
    for (const char* precision : {"float64", "float32"}) {
      const double tol = std::string(precision) == "float64" ? 1e-12 : 1e-5;
      const EngineSetup cl = setup(c.keys, "opencl", precision), ref = setup(c.keys, "reference", precision);
      const int L = cl.config.model.layers;
      for (const int B : {1, 3, 7}) {
        INFO(c.name << ", " << precision << ", B = " << B);
        TrialBatch batch(cl, std::vector<int>(kTrials.begin(), kTrials.begin() + B));
        const auto got = batched(batch, L);
        CHECK(batch.launches() == (B > 1 ? L * c.calls_per_block : 0));  // B = 1: no batch, the trial's own calls
        for (int b = 0; b < B; ++b) {
          const int trial = kTrials[static_cast<std::size_t>(b)];
          const auto want_cl = alone(cl, trial), want_ref = alone(ref, trial);
          for (std::size_t t = 0; t <= static_cast<std::size_t>(L); ++t) {
            CHECK(bitwise_equal(got[static_cast<std::size_t>(b)][t], want_cl[t]));
            CHECK(rel_max(got[static_cast<std::size_t>(b)][t], want_ref[t]) <= tol);
          }
        }
      }
    }
  }
}

TEST_CASE("opencl run: trials batched equal trials launched one at a time, bitwise", "[opencl]") {
  if (!opencl_device_present()) return;
  Values keys = settings()[1].keys;
  keys["run.platform"] = "opencl";
  keys["run.trials"] = "6";
  keys["output.tokens"] = "final";
  const EngineSetup s = prepare(make_config(keys));
  CHECK(trial_workers(s, 1, 6) == 6);  // the batch, not run.threads
  setenv("RCSIM_OPENCL_BATCH", "1", 1);
  CHECK(trial_workers(s, 1, 6) == 1);
  const RunResults one = run_simulation(s, 1);
  setenv("RCSIM_OPENCL_BATCH", "4", 1);  // a batch of trials 0-3, then one of trials 4 and 5
  const RunResults four = run_simulation(s, 1);
  unsetenv("RCSIM_OPENCL_BATCH");
  const RunResults all = run_simulation(s, 1);
  for (std::size_t m = 0; m < one.token.size(); ++m) {
    INFO(one.token_info[m].name);
    CHECK(bitwise_equal(four.token[m], one.token[m]));
    CHECK(bitwise_equal(all.token[m], one.token[m]));
  }
  for (std::size_t t = 0; t < 6; ++t) CHECK(bitwise_equal(all.snapshots[t].back(), one.snapshots[t].back()));
}

// The run drives its trials through TrialBatch (run_trials: each worker takes batches of
// trial_batch_size trials): every result of the run is bitwise the same for batches of 1, 2, 3, 7
// and the platform's own choice, on 1 and 2 threads, including a run whose trials stop at a
// non-finite layer, the reverse pass's measures, the attention product and the kept matrices.
namespace {

bool same_bits(const Matrix& a, const Matrix& b) {  // NaN included: the same computation, the same bits
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(double) * static_cast<std::size_t>(a.size())) == 0;
}

void check_same_run(const RunResults& got, const RunResults& want) {
  REQUIRE(got.token.size() == want.token.size());
  for (std::size_t m = 0; m < want.token.size(); ++m) {
    INFO(want.token_info[m].name);
    CHECK(same_bits(got.token[m], want.token[m]));
  }
  REQUIRE(got.attention.size() == want.attention.size());
  for (std::size_t m = 0; m < want.attention.size(); ++m) {
    INFO(want.attention_info[m].name);
    CHECK(same_bits(got.attention[m], want.attention[m]));
  }
  REQUIRE(got.spectrum.size() == want.spectrum.size());
  for (std::size_t t = 0; t < want.spectrum.size(); ++t) CHECK(same_bits(got.spectrum[t], want.spectrum[t]));
  REQUIRE(got.snapshots.size() == want.snapshots.size());
  for (std::size_t t = 0; t < want.snapshots.size(); ++t) {
    REQUIRE(got.snapshots[t].size() == want.snapshots[t].size());
    for (std::size_t k = 0; k < want.snapshots[t].size(); ++k) CHECK(same_bits(got.snapshots[t][k], want.snapshots[t][k]));
  }
  REQUIRE(got.attention_matrices.size() == want.attention_matrices.size());
  for (std::size_t t = 0; t < want.attention_matrices.size(); ++t) {
    REQUIRE(got.attention_matrices[t].size() == want.attention_matrices[t].size());
    for (std::size_t k = 0; k < want.attention_matrices[t].size(); ++k)
      CHECK(same_bits(got.attention_matrices[t][k], want.attention_matrices[t][k]));
  }
  CHECK(got.underflow_layer == want.underflow_layer);
  CHECK(got.nonfinite_layer == want.nonfinite_layer);
  CHECK(got.degenerate_total == want.degenerate_total);
  CHECK(got.rk4_stiffness == want.rk4_stiffness);
}

RunResults run_batched(const EngineSetup& s, int threads, int batch, std::vector<int>* order = nullptr) {
  RunResults r = allocate_results(s);
  RunControl ctl;
  ctl.batch = batch;
  if (order) ctl.on_trial_done = [&](int trial) { order->push_back(trial); };
  run_trials(s, threads, r, {}, ctl);
  return r;
}

// Settings for whole runs: the trial-batch settings above with the measures that keep per-trial
// state between blocks, and a run whose trials leave the batch at different non-finite layers.
std::vector<std::pair<std::string, Values>> run_settings() {
  std::vector<std::pair<std::string, Values>> out;
  for (const Setting& c : settings()) {
    Values k = c.keys;
    // the reverse pass's tape on the first setting only: on the others the platform's batch is > 1
    k["output.measures"] = std::string("attn_rank,ergodicity,update_size") + (c.all_platforms ? "" : ",grad_x_norm");
    k["output.spectrum"] = "true";
    k["output.tokens"] = "all";
    k["output.attention"] = c.all_platforms ? "false" : "true";
    out.emplace_back(c.name, k);
  }
  out.emplace_back("no normalisation, W_V of standard deviation 40: trials overflow at different layers",
                   Values{{"model.tokens", "6"}, {"model.dim", "3"}, {"model.layers", "90"}, {"norm.type", "none"},
                          {"residual.alpha", "1"}, {"weights.v_std", "40"}, {"output.tokens", "final"},
                          {"output.measures", "update_size"}});
  return out;
}

}  // namespace

TEST_CASE("run: results bitwise the same for any trial batch and thread count (reference, cpu)", "[trial]") {
  for (const auto& [name, keys0] : run_settings()) {
    for (const char* platform : {"reference", "cpu"}) {
      Values keys = keys0;
      keys["run.platform"] = platform;
      keys["run.trials"] = "9";
      Config c;
      try {  // a setting the cpu platform refuses (dropout) runs on the reference only
        c = make_config(keys);
      } catch (const UsageError&) {
        if (std::string(platform) == "cpu") continue;
        throw;
      }
      const EngineSetup s = prepare(c);
      INFO(name << ", " << platform);
      std::vector<int> order;
      const RunResults want = run_batched(s, 1, 1, &order);
      CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8});  // every trial reported done once
      CHECK(trial_batch_size(s, 1, 9) == (wants_gradients(s.config) ? 1 : 4));  // the default batches too
      for (const int threads : {1, 2})
        for (const int B : {1, 2, 3, 7, 0}) {
          INFO("threads " << threads << ", batch " << B << " (0: " << trial_batch_size(s, threads, 9) << ")");
          std::vector<int> done;
          check_same_run(run_batched(s, threads, B, &done), want);
          std::sort(done.begin(), done.end());
          CHECK(done == order);
        }
    }
  }
}

TEST_CASE("run: the platform's trial batch size", "[trial]") {
  Values keys{{"model.tokens", "64"}, {"run.trials", "64"}, {"run.platform", "reference"}};
  const EngineSetup small = prepare(make_config(keys));
  REQUIRE(trial_work_bytes(small.config) + trial_large_bytes(small.config) < kSmallTrialBytes);
  CHECK(trial_batch_size(small, 2, 64) == kHostBatch);  // 64 trials on 2 threads: 4 batches of 8 each
  CHECK(trial_batch_size(small, 2, 12) == 3);           // at least 2 batches per worker
  CHECK(trial_batch_size(small, 4, 3) == 1);
  keys["model.tokens"] = "400";  // the N x N attention alone is 1.28 MB: one trial at a time
  CHECK(trial_work_bytes(make_config(keys)) > kSmallTrialBytes);
  CHECK(trial_batch_size(prepare(make_config(keys)), 2, 64) == 1);
  keys["model.tokens"] = "64";
  keys["output.tokens"] = "all";  // 41 snapshots of 64 x 64 doubles: 1.34 MB of large data per trial
  keys["model.dim"] = "64";
  keys["model.layers"] = "40";
  CHECK(trial_large_bytes(make_config(keys)) == 8.0 * 41 * 64 * 64);
  CHECK(trial_batch_size(prepare(make_config(keys)), 2, 64) == 1);
  keys.erase("output.tokens");
  keys.erase("model.dim");
  keys.erase("model.layers");
  keys["output.measures"] = "grad_x_norm";
  CHECK(trial_batch_size(prepare(make_config(keys)), 2, 64) == 1);  // a tape per trial: one at a time
}

TEST_CASE("opencl run: results bitwise the same for any trial batch", "[opencl]") {
  if (!opencl_device_present()) return;
  Values keys = settings()[2].keys;  // the particle flow with RK4 and noise
  keys["run.platform"] = "opencl";
  keys["run.trials"] = "8";
  keys["output.tokens"] = "all";
  const EngineSetup s = prepare(make_config(keys));
  CHECK(trial_batch_size(s, 1, 8) == 8);  // all the trials in flight: one launch per round
  const RunResults want = run_batched(s, 1, 1);
  for (const int B : {2, 3, 7, 0}) {
    INFO("batch " << B);
    check_same_run(run_batched(s, 2, B), want);
  }
}
