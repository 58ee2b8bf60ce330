// Sweeps at scale: the metric schedule (output.schedule), the sweep index, refusal of changed
// configurations, failed points, the balanced assignment of points to MPI ranks, progress text.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "cli/cli.hpp"
#include "config/config.hpp"
#include "config/sweep.hpp"
#include "kernel/support/errors.hpp"
#include "io/hdf5_file.hpp"
#include "app/parallel.hpp"
#include "app/progress.hpp"
#include "kernel/support/memory.hpp"
#include "kernel/trial/simulation.hpp"
#include "io/sweep_index.hpp"

using namespace rcsim;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test case, removed at its end (the suite may run concurrently).
struct Scratch {
  std::string path;
  explicit Scratch(const std::string& name)
      : path((fs::temp_directory_path() / ("rcsim_sweep_" + std::to_string(::getpid()) + "_" + name)).string()) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<std::int64_t> read_ints(const h5::File& f, const std::string& name) {
  const h5::Array a = f.read(name);
  return {a.data.begin(), a.data.end()};
}

// Run cli_main with std::cout captured.
int run_captured(const std::vector<std::string>& args, std::string& out) {
  std::ostringstream os;
  std::streambuf* old = std::cout.rdbuf(os.rdbuf());
  const int rc = cli_main(args);
  std::cout.rdbuf(old);
  out = os.str();
  return rc;
}

}  // namespace

TEST_CASE("schedules resolve to the layers worked out by hand", "[schedule]") {
  using V = std::vector<int>;
  CHECK(parse_schedule("all", 4) == V{0, 1, 2, 3, 4});
  CHECK(parse_schedule("every:3", 10) == V{0, 3, 6, 9, 10});
  CHECK(parse_schedule("every:10", 10) == V{0, 10});
  CHECK(parse_schedule("every:20", 10) == V{0, 10});
  CHECK(parse_schedule("every:1", 3) == V{0, 1, 2, 3});
  // log:K = round(10^(i/K)) <= L: 10^0.5 = 3.16 -> 3, 10^1.5 = 31.6 -> 32.
  CHECK(parse_schedule("log:1", 1000) == V{0, 1, 10, 100, 1000});
  CHECK(parse_schedule("log:2", 100) == V{0, 1, 3, 10, 32, 100});
  CHECK(parse_schedule("log:1", 50) == V{0, 1, 10, 50});
  CHECK(parse_schedule("list:5, 2 7", 10) == V{0, 2, 5, 7, 10});
  CHECK(parse_schedule(" list: 3,3,0 ", 4) == V{0, 3, 4});
  // L = 10^4 with 10 per decade: 41 values round(10^(i/10)), i = 0..40, 3 duplicates below 10
  // (1, 1, 2, 2, 3, 3, 4, 5, 6, 8: round(10^0.1) = round(1.26) = 1 repeats 1, etc.), plus 0.
  const V deep = parse_schedule("log:10", 10000);
  CHECK(deep.front() == 0);
  CHECK(deep.back() == 10000);
  CHECK(deep.size() == 39);
}

TEST_CASE("log:K skips repeated layers and equals the plain loop, the size bound holds", "[schedule]") {
  // The plain definition: round(10^(i/K)) for i = 0, 1, ... while <= L, plus 0 and L.
  auto plain = [](long long K, int L) {
    std::set<int> out = {0, L};
    for (long long i = 0;; ++i) {
      const double l = std::round(std::pow(10.0, static_cast<double>(i) / static_cast<double>(K)));
      if (l > L) break;
      out.insert(static_cast<int>(l));
    }
    return std::vector<int>(out.begin(), out.end());
  };
  for (const int L : {1, 7, 100, 1000, 5000})
    for (const long long K : {1LL, 2LL, 3LL, 10LL, 37LL, 1000LL, 100000LL}) {
      INFO("L = " << L << ", K = " << K);
      const auto got = parse_schedule("log:" + std::to_string(K), L);
      CHECK(got == plain(K, L));
      CHECK(schedule_size_bound("log:" + std::to_string(K), L) >= static_cast<double>(got.size()));
    }
  // K = INT_MAX: every layer 1 .. L once (was minutes of looping).
  const auto every = parse_schedule("log:2147483647", 300);
  CHECK(every.size() == 301);
  for (const std::string t : {"all", "every:1", "every:7", "list:3,5 9", "log:4"})
    CHECK(schedule_size_bound(t, 50) >= static_cast<double>(parse_schedule(t, 50).size()));
}

TEST_CASE("a run that cannot fit in memory is refused before anything is allocated", "[schedule][memory]") {
  // 2e9 layers x 1e6 trials x 8 bytes = 16 PB for one value per recorded layer: more than any machine.
  try {
    (void)make_config({{"model.layers", "2000000000"}, {"run.trials", "1000000"}});
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK_THAT(e.what(), Catch::Contains("model.layers = 2000000000") && Catch::Contains("would need about") &&
                             Catch::Contains("16 PB of memory"));
  }
  // 1e8 layers recording 3 per decade fits (26 recorded layers x 1e6 trials x 8 bytes = 208 MB,
  // plus 0.8 GB of layer tables).
  CHECK_NOTHROW(make_config({{"model.layers", "100000000"}, {"run.trials", "1000000"}, {"output.schedule", "log:3"}}));
}

TEST_CASE("run_memory_bytes counts the results and the layer table once, and the work storage", "[schedule][memory]") {
  // T = 2 trials, L = 3 layers, all recorded: S = 4 token columns, 3 attention columns; spectrum
  // min(N, d) = 4 values per recorded layer; snapshots of the final layer N x d = 20 values.
  const std::map<std::string, std::string> base{{"model.layers", "3"}, {"run.trials", "2"}, {"model.tokens", "5"},
                                               {"model.dim", "4"}, {"output.spectrum", "true"},
                                               {"output.tokens", "final"}, {"run.threads", "1"}};
  const auto with = [&](const std::string& key, const std::string& value) {
    auto o = base;
    o[key] = value;
    return make_config(o);
  };
  const Config c = make_config(base);
  const double nt = static_cast<double>(token_measure_info().size()), na = static_cast<double>(attention_measure_info().size());
  const double values = 2 * (4 * nt + 3 * na) + 2 * 4 * 4 + 2 * 1 * 5 * 4;
  // The layer tables: 8 bytes per layer 0..3 (two int columns) and 12 per recorded layer (three
  // int copies of the 4 recorded layers). For a moment the larger of a checkpoint's row of one
  // trial's measures (4 nt + 3 na values) and the writer's T x S copy of one measure with six
  // values per recorded layer (coordinates, summary statistics): 2 x 4 + 6 x 4 = 32 values.
  const double tables = 8 * 4 + 12 * 4, row = 8 * (4 * nt + 3 * na), writer = 8 * 32;
  CHECK(results_memory_bytes(c) == 8 * values + tables + std::max(row, writer));
  CHECK(run_memory_bytes(c) == 8 * values + tables + std::max(row, writer) + work_memory_bytes(c));
  // A file image (Python: no checkpoint) holds the file in memory and copies it out: the results twice more.
  CHECK(run_memory_bytes(c, true) == 3 * (8 * values + tables + writer) + work_memory_bytes(c));
  CHECK_NOTHROW(require_run_memory(c));
  // An asked measure is one more column per recorded layer, and one more value per recorded layer
  // in the checkpoint's row when the row is the larger transient.
  CHECK(results_memory_bytes(with("output.measures", "effective_rank")) - results_memory_bytes(c) ==
        8 * 2 * 4 + (std::max(row + 8 * 4, writer) - std::max(row, writer)));
  // Work storage, N = 5, d = 4, one head with d_k = d, one thread, by hand: the program (23 MB),
  // the mask and its analysis 2 x 25 bytes; doubles: logits 25, 12 token-sized matrices
  // 12 x 20 = 240, weights W_Q, W_K, W_V 3 x 16 = 48 and 4 d = 16 of vectors: 329 doubles.
  CHECK(work_memory_bytes(c) == kProgramBytes + 50 + 8 * 329);
  // Each further worker thread adds its own storage (not more threads than trials).
  const Config c2 = with("run.threads", "2");
  CHECK(work_memory_bytes(c2) - work_memory_bytes(c) == 8 * 329);
  CHECK(work_memory_bytes(with("run.threads", "8")) == work_memory_bytes(c2));
  // Attention matrices: per thread a second N x N, and T x 3 recorded N x N matrices.
  const Config ca = with("output.attention", "true");
  CHECK(run_memory_bytes(ca) - run_memory_bytes(c) == 8 * 25 + 8 * (2 * 3 * 25));
}

TEST_CASE("the estimate counts the large per-trial data up to the checkpoint's cap", "[schedule][memory]") {
  // N = d = 64, L = 64, output.tokens = all: 65 snapshots of 64 x 64 doubles, 2.1 MB per trial;
  // 400 trials hold 852 MB of /tokens, of which a run keeps at most the cap (64 MB), the two
  // trials in flight and one more (io/checkpoint.hpp).
  const Config c = make_config({{"model.tokens", "64"}, {"model.dim", "64"}, {"model.layers", "64"},
                                {"run.trials", "400"}, {"output.tokens", "all"}, {"run.threads", "2"}});
  const double per_trial = 8.0 * 65 * 64 * 64;
  CHECK(trial_large_bytes(c) == per_trial);
  const double whole = results_memory_bytes(c, true), measures = whole - 400 * per_trial;
  CHECK(measures < 4e6);  // 400 trials x 65 layers x about 13 measures x 8 bytes
  CHECK(results_memory_bytes(c) == measures + kPendingLargeBytes + 3 * per_trial);
  CHECK(run_memory_bytes(c) == results_memory_bytes(c) + work_memory_bytes(c));
  // A file image (Python: no checkpoint) holds them all, and the file twice.
  CHECK(run_memory_bytes(c, true) == 3 * whole + work_memory_bytes(c));
}

TEST_CASE("a run whose working storage cannot fit names model.tokens", "[schedule][memory]") {
  // N = 200000: on the reference platform the N x N logits alone are 320 GB per thread, and the
  // dense mask 2 N^2 bytes (80 GB); on the cpu platform (run.platform = auto) no N x N array at
  // all (the attention in row blocks, the built-in mask as row ranges): O(N d), about 127 MB.
  const double n = 200000;
  const Config ref = make_config({{"model.tokens", "200000"}, {"run.threads", "1"}, {"output.file", "big.h5"},
                                  {"run.platform", "reference"}});
  CHECK(work_memory_bytes(ref) > 8.0 * n * n + 2.0 * n * n);
  const Config c = make_config({{"model.tokens", "200000"}, {"run.threads", "1"}, {"output.file", "big.h5"}});
  CHECK(work_memory_bytes(c) > kProgramBytes + 8.0 * 15 * n * 4);  // 12 token-sized matrices and q, k, v (d = 4)
  CHECK(work_memory_bytes(c) < kProgramBytes + 1000.0 * n);
  CHECK_NOTHROW(require_run_memory(c));
  try {
    require_run_memory(ref);
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK_THAT(e.what(), Catch::Contains("'big.h5' would need about") && Catch::Contains("working storage") &&
                             Catch::Contains("model.tokens"));
  }
}

TEST_CASE("the work storage of a GPT-2-sized block dominates its results", "[schedule][memory]") {
  // d = 768, 12 heads of 64, value width 64, MLP 3072: per thread the weights are
  // 12 x (2 x 768 x 64 + 2 x 768 x 64) + 2 x 768 x 3072 + 3072 + 768 + 4 x 768 = 7,083,264
  // doubles (57 MB), more than the 4 x 128 x 128 logits and token matrices.
  const Config c = make_config({{"model.tokens", "128"}, {"model.dim", "768"}, {"model.heads", "12"},
                                {"model.key_dim", "64"}, {"model.value_dim", "64"}, {"mlp.width", "3072"},
                                {"run.threads", "1"}, {"run.trials", "4"}, {"model.layers", "10"}});
  const double weights = 12.0 * (2 * 768 * 64 + 2 * 768 * 64) + 2.0 * 768 * 3072 + 3072 + 768 + 4 * 768;
  CHECK(work_memory_bytes(c) == kProgramBytes + 2.0 * 128 * 128 + 8 * (128.0 * 128 + 12 * 128 * 768 + weights));
  CHECK(work_memory_bytes(c) > kProgramBytes + 56e6);
}

TEST_CASE("bad schedules are usage errors naming output.schedule", "[schedule]") {
  for (const std::string bad :
       {"every:0", "every:x", "every", "log:", "log:-2", "list:", "list:11", "list:-1", "list:1.5", "sometimes", ""}) {
    INFO("value: '" << bad << "'");
    try {
      parse_schedule(bad, 10);
      FAIL("accepted");
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find("output.schedule") != std::string::npos);
    }
  }
  const Scratch scratch("bad_schedule");
  const std::string& dir = scratch.path;
  CHECK(cli_main({"run", "--config", "/dev/null", "--quiet", "--model.layers=5", "--output.schedule=list:6",
                  "--output.file=" + dir + "/x.h5"}) == 2);
  CHECK_FALSE(fs::exists(dir + "/x.h5"));
}

TEST_CASE("a scheduled run records the chosen layers, equal to the same layers of a full run", "[schedule][io]") {
  const Scratch scratch("schedule_run");
  const std::string& dir = scratch.path;
  const std::vector<std::string> base = {"run",
                                         "--config",
                                         "/dev/null",
                                         "--quiet",
                                         "--model.tokens=5",
                                         "--model.dim=3",
                                         "--model.layers=12",
                                         "--run.trials=3",
                                         "--norm.type=layernorm",
                                         "--output.spectrum=true"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  REQUIRE(cli_main(with({"--output.file=" + dir + "/all.h5"})) == 0);
  REQUIRE(cli_main(with({"--output.schedule=list:1,4 9", "--output.file=" + dir + "/some.h5"})) == 0);
  const h5::File all = h5::File::open_read(dir + "/all.h5"), some = h5::File::open_read(dir + "/some.h5");
  CHECK(read_ints(all, "layer") == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  const std::vector<std::int64_t> kept = {0, 1, 4, 9, 12};
  CHECK(read_ints(some, "layer") == kept);
  CHECK(read_ints(some, "attention_layer") == std::vector<std::int64_t>{0, 1, 4, 9});
  for (const std::string m : {"metrics/mu", "metrics/sigma_min", "metrics/rank", "metrics/attn_entropy",
                              "metrics/spectrum", "summary/mu_median", "summary/full_rank_fraction"}) {
    INFO(m);
    const h5::Array a = all.read(m), s = some.read(m);
    const bool attention = m == "metrics/attn_entropy";
    const bool summary = m.rfind("summary", 0) == 0;
    const std::size_t cols_all = summary ? a.shape[0] : a.shape[1];
    const std::size_t cols_some = summary ? s.shape[0] : s.shape[1];
    REQUIRE(cols_some == (attention ? 4u : 5u));
    const std::size_t rows = summary ? 1 : a.shape[0];
    const std::size_t inner = a.shape.size() == 3 ? a.shape[2] : 1;
    for (std::size_t t = 0; t < rows; ++t)
      for (std::size_t k = 0; k < cols_some; ++k)
        for (std::size_t j = 0; j < inner; ++j) {
          const auto layer = static_cast<std::size_t>(kept[k]);
          // Bitwise: the schedule changes what is measured, never the dynamics.
          CHECK(s.data[(t * cols_some + k) * inner + j] == a.data[(t * cols_all + layer) * inner + j]);
        }
  }
  CHECK(all.read("diagnostics/underflow_layer").data == some.read("diagnostics/underflow_layer").data);
}

namespace {
// A 2 x 2 product sweep of tiny runs into DIR/sweep/.
std::string write_sweep_ini(const std::string& dir, const std::string& extra = "") {
  const std::string ini = dir + "/sweep.ini";
  std::ofstream(ini) << "[model]\ntokens = 4\ndim = 2\nlayers = 3\n[run]\ntrials = 2\nthreads = 1\n[output]\nfile = "
                     << dir << "/sweep.h5\n"
                     << extra << "[sweep]\nmask.type = complete, causal\nmodel.d_qk = 0.5, 2\n";
  return ini;
}
}  // namespace

TEST_CASE("the sweep index lists every point, its parameters, file and status", "[sweep]") {
  const Scratch scratch("index");
  const std::string& dir = scratch.path;
  const std::string ini = write_sweep_ini(dir);
  std::string out;
  REQUIRE(run_captured({"sweep", "--config", ini, "--quiet", "--dry-run"}, out) == 0);
  CHECK(out.find("4 points") != std::string::npos);
  CHECK(out.find("0 of 4 points complete") != std::string::npos);
  CHECK(out.find("mask.type=causal__model.d_qk=2.h5  [pending]") != std::string::npos);
  CHECK_FALSE(fs::exists(dir + "/sweep/index.h5"));

  REQUIRE(cli_main({"sweep", "--config", ini, "--quiet"}) == 0);
  const std::string index = dir + "/sweep/index.h5";
  REQUIRE(fs::exists(index));
  CHECK_FALSE(fs::exists(index + ".tmp"));
  {
    const h5::File f = h5::File::open_read(index);
    CHECK(f.attr_string("filetype") == "rcsim-sweep-index");
    CHECK(f.attr_int("points") == 4);
    CHECK(f.attr_int("points_complete") == 4);
    CHECK(f.attr_string("sweep_mode") == "product");
    // Product order: the last axis fastest.
    CHECK(f.read_strings("name") ==
          std::vector<std::string>{"mask.type=complete__model.d_qk=0.5", "mask.type=complete__model.d_qk=2",
                                   "mask.type=causal__model.d_qk=0.5", "mask.type=causal__model.d_qk=2"});
    CHECK(f.read_strings("file")[3] == "mask.type=causal__model.d_qk=2.h5");
    CHECK(f.read_strings("status") == std::vector<std::string>(4, "complete"));
    CHECK(f.read_strings("keys") == std::vector<std::string>{"mask.type", "model.d_qk"});
    CHECK(f.read_strings("parameters/mask.type") ==
          std::vector<std::string>{"complete", "complete", "causal", "causal"});
    CHECK(f.read_strings("parameters/model.d_qk") == std::vector<std::string>{"0.5", "2", "0.5", "2"});
    const std::string def = f.read_string("definition");
    CHECK(def.find("mask.type = complete, causal") != std::string::npos);
    CHECK(def.find("model.layers = 3") != std::string::npos);
    for (const auto& file : f.read_strings("file"))
      CHECK(h5::File::open_read(dir + "/sweep/" + file).attr_int("complete") == 1);
  }
  REQUIRE(run_captured({"sweep", "--config", ini, "--quiet", "--dry-run"}, out) == 0);
  CHECK(out.find("4 of 4 points complete") != std::string::npos);
  CHECK(out.find("mask.type=causal__model.d_qk=2.h5  [complete]") != std::string::npos);
  // A rerun skips every point: no file is rewritten.
  const auto stamp = fs::last_write_time(dir + "/sweep/mask.type=causal__model.d_qk=2.h5");
  REQUIRE(cli_main({"sweep", "--config", ini, "--quiet"}) == 0);
  CHECK(fs::last_write_time(dir + "/sweep/mask.type=causal__model.d_qk=2.h5") == stamp);
}

TEST_CASE("a changed configuration on rerun is refused with exit 2 unless --force", "[sweep][cli]") {
  const Scratch scratch("changed");
  const std::string& dir = scratch.path;
  SECTION("a single run") {
    const std::string out = dir + "/one.h5";
    const std::vector<std::string> args = {"run",     "--config",         "/dev/null",
                                           "--quiet", "--model.layers=3", "--output.file=" + out};
    REQUIRE(cli_main(args) == 0);
    const auto stamp = fs::last_write_time(out);
    auto changed = args;
    changed[4] = "--model.layers=4";  // replaced: a key given twice is itself a usage error
    CHECK(cli_main(changed) == 2);
    CHECK(fs::last_write_time(out) == stamp);
    CHECK(h5::File::open_read(out).read_string("config").find("layers = 3") != std::string::npos);
    changed.push_back("--force");
    CHECK(cli_main(changed) == 0);
    CHECK(h5::File::open_read(out).read_string("config").find("layers = 4") != std::string::npos);
  }
  SECTION("a sweep whose base configuration changed") {
    const std::string ini = write_sweep_ini(dir);
    REQUIRE(cli_main({"sweep", "--config", ini, "--quiet"}) == 0);
    CHECK(cli_main({"sweep", "--config", ini, "--quiet", "--run.seed=7"}) == 2);  // index definition differs
    std::string out;
    REQUIRE(run_captured({"sweep", "--config", ini, "--quiet", "--run.seed=7", "--dry-run"}, out) == 0);
    CHECK(out.find("DIFFERENT configuration (key 'run.seed': 20240527 -> 7)") != std::string::npos);
    CHECK(out.find("refused without --force") != std::string::npos);
    // Without the index, the point files themselves are checked.
    fs::remove(dir + "/sweep/index.h5");
    CHECK(cli_main({"sweep", "--config", ini, "--quiet", "--run.seed=7"}) == 2);
    CHECK(cli_main({"sweep", "--config", ini, "--quiet", "--run.seed=7", "--force"}) == 0);
    CHECK(read_sweep_definition(dir + "/sweep/index.h5")->find("seed = 7") != std::string::npos);
  }
  SECTION("a sweep with another axis") {
    const std::string ini = write_sweep_ini(dir);
    REQUIRE(cli_main({"sweep", "--config", ini, "--quiet"}) == 0);
    CHECK(cli_main({"sweep", "--config", ini, "--quiet", "--sweep.model.d_qk=0.5,2,8"}) == 2);
  }
}

TEST_CASE("a point whose input file is missing stops the sweep before any point runs, naming the key", "[sweep]") {
  // Every point's inputs are read and checked before the first point is computed (cli.cpp): a
  // missing file is a usage error (exit 2), not a failed point among completed ones.
  const Scratch scratch("failed");
  const std::string& dir = scratch.path;
  std::ofstream(dir + "/sweep.ini") << "[model]\ntokens = 3\ndim = 2\nlayers = 2\n[run]\ntrials = 1\n[mask]\nfile = "
                                    << dir << "/no_such_mask.h5\n[output]\nfile = " << dir
                                    << "/sweep.h5\n[sweep]\nmask.type = complete, custom, causal\n";
  std::ostringstream err;
  auto* old = std::cerr.rdbuf(err.rdbuf());
  const int code = cli_main({"sweep", "--config", dir + "/sweep.ini", "--quiet"});
  std::cerr.rdbuf(old);
  CHECK(code == 2);
  CHECK(err.str().find("mask.file") != std::string::npos);
  CHECK(err.str().find("no_such_mask.h5") != std::string::npos);
  CHECK_FALSE(fs::exists(dir + "/sweep/index.h5"));
  CHECK_FALSE(fs::exists(dir + "/sweep/mask.type=complete.h5"));  // not even the points before it
}

TEST_CASE("a sweep whose points would share a file is a usage error", "[sweep]") {
  const Scratch scratch("duplicate");
  CHECK(cli_main({"sweep", "--config", "/dev/null", "--quiet", "--sweep.model.dim=2, 3, 2",
                  "--output.file=" + scratch.path + "/d.h5"}) == 2);
  CHECK_FALSE(fs::exists(scratch.path + "/d"));
}

TEST_CASE("points are balanced over ranks, longest first", "[sweep]") {
  // Hand-worked LPT: 5 -> r0, 4 -> r1, 3 -> r1 (4 < 5), 3 -> r0 (5 < 7), 1 -> r1 (7 < 8): loads 8, 8.
  CHECK(mpi::assign_balanced({5, 4, 3, 3, 1}, 2) == std::vector<int>{0, 1, 1, 0, 1});
  CHECK(mpi::assign_balanced({1, 1, 1}, 1) == std::vector<int>{0, 0, 0});
  CHECK(mpi::assign_balanced({2, 2, 2, 2}, 4) == std::vector<int>{0, 1, 2, 3});
  CHECK(mpi::size() == 1);  // the test binary never starts MPI
}

TEST_CASE("durations in progress lines", "[sweep]") {
  CHECK(Progress::format_duration(65) == "1:05");
  CHECK(Progress::format_duration(3725) == "1:02:05");
  CHECK(Progress::format_duration(NAN) == "?");
}

TEST_CASE("progress in a log: a line with done/total, rate and ETA", "[sweep]") {
  std::ostringstream log;
  const auto previous = spdlog::default_logger();
  auto logger =
      std::make_shared<spdlog::logger>("progress_test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
  logger->set_pattern("%v");
  spdlog::set_default_logger(logger);
  {
    Progress p(Progress::Mode::log, 10, 2, 0.0);  // interval 0: a line at every update
    p.begin_point("a", 6);
    p.trials_done(0, 4);  // 2 of the 6 trials resumed from a checkpoint
    p.trials_done(3, 4);
    p.end_point();
    Progress quiet(Progress::Mode::off, 10, 1);
    quiet.begin_point("b", 10);
    quiet.trials_done(5, 10);
  }
  spdlog::set_default_logger(previous);
  const std::string text = log.str();
  CHECK(text.find("progress:  20% 2/10 trials, point 1/2") != std::string::npos);
  CHECK(text.find("progress:  50% 5/10 trials, point 1/2") != std::string::npos);
  CHECK(text.find("ETA") != std::string::npos);
  CHECK(text.find("trials/s") != std::string::npos);
  CHECK(text.find("100%") == std::string::npos);
  CHECK(text.find("progress:  60% 6/10 trials") != std::string::npos);  // after end_point
  CHECK(std::count(text.begin(), text.end(), '\n') == 3);               // two updates and end_point; nothing when off
}

TEST_CASE("the ETA counts work, not trials: expensive points are not estimated at the cheap rate", "[sweep]") {
  CHECK(std::isnan(eta_by_work(10, 0, 3.0)));
  CHECK(std::isnan(eta_by_work(10, 5, 0.0)));
  CHECK(eta_by_work(30, 10, 2.0) == Approx(6.0));
  CHECK(eta_by_work(30, 10, 2.0, 1.5) == Approx(7.5));
  CHECK(eta_by_work(-1, 10, 2.0, -1) == 0.0);
  // Hand-worked, on a clock the test sets: two cheap points (work 1 per trial) then two 10x dearer
  // (work 10), 2 trials each, total work 44; each point spends 0.5 s before its trials and 0.5 s
  // after them (set-up, writing its file), each unit of work 1 s.
  double t = 0;
  Progress p(Progress::Mode::off, 8, 4, 10.0, 44.0);
  p.set_clock([&] { return t; });
  const auto point = [&](const std::string& name, double work) {
    p.begin_point(name, 2, work);
    t += 0.5;
    p.trials_done(0, 2);
    for (int k = 1; k <= 2; ++k) {
      t += work;
      p.trials_done(k, 2);
    }
    t += 0.5;
    p.end_point();
  };
  point("cheap1", 1.0);
  point("cheap2", 1.0);
  // At 6 s: 4 units computed in 4 s of trials -> 40 units = 40 s, and 2 points x 1 s outside
  // their trials: 42 s (the truth: 2 x (0.5 + 20 + 0.5)). Counting trials (4 of 8 in 6 s) would
  // claim 6 s.
  ProgressState s = p.state(t);
  CHECK(s.trials_done == 4);
  CHECK(s.point == 2);
  CHECK(s.fraction == Approx(4.0 / 44.0));
  CHECK(s.trial_rate == Approx(4.0 / 6.0));
  CHECK(s.eta == Approx(42.0));
  // The first dear point set up (0.5 s of its 1 s outside trials spent), then one trial done.
  p.begin_point("dear1", 2, 10.0);
  t += 0.5;
  p.trials_done(0, 2);
  CHECK(p.state(t).eta == Approx(41.5));
  t += 10;
  p.trials_done(1, 2);
  s = p.state(t);
  CHECK(s.point == 3);
  CHECK(s.name == "dear1");
  CHECK(s.eta == Approx(31.5));  // 14 units in 14 s; 30 left; 1.5 s outside trials
  t += 10;
  p.trials_done(2, 2);
  t += 0.5;
  p.end_point();
  // Resumed work counts as done but took no time here: the last point with 1 of its 2 trials from
  // a checkpoint: 34 units done, 24 computed in 24 s, 10 left -> 10 s + 0.5 s of writing (with
  // the resumed trial in the rate: 10 x 24 / 34 = 7.1 s).
  p.begin_point("dear2", 2, 10.0);
  t += 0.5;
  p.trials_done(0, 1);
  s = p.state(t);
  CHECK(s.trials_done == 7);
  CHECK(s.fraction == Approx(34.0 / 44.0));
  CHECK(s.eta == Approx(10.5));
  t += 10;
  p.trials_done(1, 1);
  s = p.state(t);
  CHECK(s.trials_done == 8);
  CHECK(s.fraction == 1.0);
  CHECK(s.eta == 0.0);
  // describe: the bar's percentage is the work's (4 of 44 units: 9%), the trials are counted.
  ProgressState d;
  d.trials_done = 4;
  d.trials_total = 8;
  d.point = 2;
  d.points = 4;
  d.fraction = 4.0 / 44.0;
  d.elapsed = 6;
  d.trial_rate = 0.667;
  d.eta = 42;
  CHECK(Progress::describe(d, true) ==
        "[##......................]   9% 4/8 trials, point 2/4, 0.667 trials/s, elapsed 0:06, ETA 0:42");
}

TEST_CASE("a product sweep is counted before it is expanded, and an absurd one refused naming its size",
          "[sweep][hostile]") {
  using Axes = std::vector<std::pair<std::string, std::vector<std::string>>>;
  const auto axes = [](int keys, int values) {
    Axes a;
    const char* names[] = {"run.seed", "model.dim", "model.tokens", "model.layers", "run.trials", "mask.window",
                           "model.heads", "residual.alpha", "norm.eps"};
    for (int k = 0; k < keys; ++k) {
      std::vector<std::string> v;
      for (int i = 1; i <= values; ++i) v.push_back(std::to_string(i));
      a.emplace_back(names[k], v);
    }
    return a;
  };
  // 10^5 points: the limit itself is allowed (counted, not expanded here).
  CHECK_NOTHROW(require_sweep_size(axes(5, 10)));
  // 10^8 points (the audit's case; 6.1 GB when expanded): refused at once, before any expansion,
  // with the count and each list's length in the message.
  try {
    const std::map<std::string, std::string> base = {{"output.file", "/tmp/rcsim_absurd_sweep.h5"}};
    (void)expand_sweep(base, axes(8, 10), "product");
    FAIL("an absurd sweep was expanded");
  } catch (const UsageError& e) {
    const std::string m = e.what();
    CHECK(m.find("1e+08 points") != std::string::npos);
    CHECK(m.find("10 (run.seed) x 10 (model.dim)") != std::string::npos);
    CHECK(m.find("at most 100000") != std::string::npos);
  }
  // A product that overflows 64-bit integers is still counted (in double) and refused.
  CHECK_THROWS_AS(require_sweep_size(axes(9, 200)), UsageError);
}
