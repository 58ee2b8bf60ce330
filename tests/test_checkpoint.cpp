// Trial checkpoints: an interrupted run resumes to the same result as an uninterrupted one.
#include <catch2/catch.hpp>

#include <filesystem>

#include "run/checkpoint.hpp"
#include "core/config.hpp"
#include "hdf5/hdf5_file.hpp"
#include "run/run_file.hpp"

using namespace rcsim;
namespace fs = std::filesystem;

namespace {
bool same(const RunResults& a, const RunResults& b) {
  bool ok = true;
  for (std::size_t m = 0; m < a.token.size(); ++m) ok &= a.token[m].cwiseEqual(b.token[m]).all();
  for (std::size_t m = 0; m < a.attention.size(); ++m) ok &= a.attention[m].cwiseEqual(b.attention[m]).all();
  ok &= a.spectrum == b.spectrum;
  ok &= a.snapshots == b.snapshots;
  ok &= a.attention_matrices == b.attention_matrices;
  ok &= a.underflow_layer == b.underflow_layer && a.degenerate_total == b.degenerate_total;
  return ok;
}
}  // namespace

TEST_CASE("saved trials reload exactly and the rest completes the run", "[io][checkpoint]") {
  const std::string path = (fs::temp_directory_path() / "rcsim_test.h5.partial").string();
  fs::remove(path);
  const Config c = make_config({{"model.tokens", "6"}, {"model.dim", "4"}, {"model.layers", "7"}, {"run.trials", "9"},
                                {"output.spectrum", "true"}, {"output.tokens", "0,7"}, {"norm.type", "layernorm"},
                                {"output.attention", "true"}, {"output.measures", "clusters,ergodicity"}});
  const EngineSetup s = prepare(c);
  REQUIRE(s.config.output.attention);
  const RunResults full = run_simulation(s, 2);
  {
    Checkpoint cp(path, c.to_ini(), 1e9);  // never flushes by itself
    for (int t : {0, 3, 4, 8}) cp.completed(full, t);
    CHECK_FALSE(fs::exists(path));
    cp.flush(full);
    REQUIRE(fs::exists(path));
  }
  RunResults resumed = allocate_results(s);
  Checkpoint cp(path, c.to_ini());
  const std::vector<char> done = cp.load(resumed);
  CHECK(done == std::vector<char>{1, 0, 0, 1, 1, 0, 0, 0, 1});
  int ran = 0;
  RunControl ctl;
  ctl.on_trial_done = [&](int) { ++ran; };
  run_trials(s, 1, resumed, done, ctl);
  CHECK(ran == 5);
  CHECK(same(resumed, full));

  SECTION("a checkpoint of another configuration is discarded") {
    const Config other = make_config({{"model.tokens", "6"}, {"model.dim", "4"}, {"model.layers", "7"},
                                      {"run.trials", "9"}, {"run.seed", "1"}});
    RunResults r = allocate_results(prepare(other));
    Checkpoint cp2(path, other.to_ini());
    const auto loaded = cp2.load(r);
    CHECK(std::count(loaded.begin(), loaded.end(), 1) == 0);
    CHECK_FALSE(fs::exists(path));
  }
}

TEST_CASE("run_to_file resumes from a checkpoint and removes it", "[io][checkpoint]") {
  const std::string out = (fs::temp_directory_path() / "rcsim_test_resume.h5").string();
  fs::remove(out);
  const Config c = make_config({{"model.tokens", "5"}, {"model.dim", "3"}, {"model.layers", "4"},
                                {"run.trials", "6"}, {"output.file", out}});
  const RunResults full = run_simulation(prepare(c), 1);
  {
    Checkpoint cp(out + ".partial", c.to_ini());
    cp.completed(full, 2);
    cp.completed(full, 5);
    cp.flush(full);
  }
  run_to_file(c, {"test", 1}, nullptr, false);
  CHECK_FALSE(fs::exists(out + ".partial"));
  const h5::Array mu = h5::File::open_read(out).read("metrics/mu");
  for (int t = 0; t < 6; ++t)
    for (int l = 0; l <= 4; ++l) CHECK(mu.data[static_cast<std::size_t>(t * 5 + l)] == full.token[0](t, l));
}
