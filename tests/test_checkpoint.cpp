// Trial checkpoints: an interrupted run resumes to the same result as an uninterrupted one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "app/run.hpp"
#include "io/inputs.hpp"
#include "io/checkpoint.hpp"
#include "config/config.hpp"
#include "io/hdf5_file.hpp"
#include "io/run_file.hpp"

using namespace rcsim;
namespace fs = std::filesystem;

namespace {
// The measures and diagnostics (what stays in memory).
bool same_measures(const RunResults& a, const RunResults& b) {
  bool ok = true;
  for (std::size_t m = 0; m < a.token.size(); ++m) ok &= a.token[m].cwiseEqual(b.token[m]).all();
  for (std::size_t m = 0; m < a.attention.size(); ++m) ok &= a.attention[m].cwiseEqual(b.attention[m]).all();
  ok &= a.underflow_layer == b.underflow_layer && a.degenerate_total == b.degenerate_total;
  return ok;
}

// A trial's matrices in C order, one after the other (the run file's row of that trial).
std::vector<double> flat(const std::vector<Matrix>& ms) {
  std::vector<double> out;
  for (const Matrix& m : ms) {
    const RowMajorMatrix rm = m;
    out.insert(out.end(), rm.data(), rm.data() + rm.size());
  }
  return out;
}

// Bitwise equal (NaN payloads included).
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// Trial t's large data in `r` (in memory) or in `cp` (stored), against `full`'s.
bool same_large(const RunResults& r, const Checkpoint& cp, const RunResults& full, int t) {
  const auto ti = static_cast<std::size_t>(t);
  if (!cp.stored(t))
    return r.spectrum[ti] == full.spectrum[ti] && r.snapshots[ti] == full.snapshots[ti] &&
           r.attention_matrices[ti] == full.attention_matrices[ti];
  return r.snapshots[ti].empty() && r.attention_matrices[ti].empty() && r.spectrum[ti].size() == 0 &&
         same_bits(cp.read_large(r, t, LargeData::spectrum), flat({full.spectrum[ti]})) &&
         same_bits(cp.read_large(r, t, LargeData::snapshots), flat(full.snapshots[ti])) &&
         same_bits(cp.read_large(r, t, LargeData::attention_matrices), flat(full.attention_matrices[ti]));
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
    RunResults saved = full;
    Checkpoint cp(path, c.to_ini(), {}, 1e9);  // never flushes by itself
    for (int t : {0, 3, 4, 8}) cp.completed(saved, t);
    CHECK_FALSE(fs::exists(path));
    cp.flush(saved);
    REQUIRE(fs::exists(path));
    // The flushed trials' large data left memory; the file has them, bitwise.
    for (int t = 0; t < 9; ++t) CHECK(cp.stored(t) == (t == 0 || t == 3 || t == 4 || t == 8));
    for (int t = 0; t < 9; ++t) CHECK(same_large(saved, cp, full, t));
  }
  RunResults resumed = allocate_results(s);
  Checkpoint cp(path, c.to_ini(), {});
  const std::vector<char> done = cp.load(resumed);
  CHECK(done == std::vector<char>{1, 0, 0, 1, 1, 0, 0, 0, 1});
  int ran = 0;
  RunControl ctl;
  ctl.on_trial_done = [&](int) { ++ran; };
  run_trials(s, 1, resumed, done, ctl);
  CHECK(ran == 5);
  CHECK(same_measures(resumed, full));
  // The loaded trials' large data stay in the checkpoint, not in memory.
  for (int t = 0; t < 9; ++t) CHECK(cp.stored(t) == static_cast<bool>(done[static_cast<std::size_t>(t)]));
  for (int t = 0; t < 9; ++t) CHECK(same_large(resumed, cp, full, t));

  SECTION("a checkpoint of another configuration is discarded") {
    const Config other = make_config({{"model.tokens", "6"}, {"model.dim", "4"}, {"model.layers", "7"},
                                      {"run.trials", "9"}, {"run.seed", "1"}});
    RunResults r = allocate_results(prepare(other));
    Checkpoint cp2(path, other.to_ini(), {});
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
    RunResults saved = full;
    Checkpoint cp(out + ".partial", c.to_ini(), {});
    cp.completed(saved, 2);
    cp.completed(saved, 5);
    cp.flush(saved);
  }
  run_to_file(c, {"test", 1}, nullptr, false);
  CHECK_FALSE(fs::exists(out + ".partial"));
  const h5::Array mu = h5::File::open_read(out).read("metrics/mu");
  for (int t = 0; t < 6; ++t)
    for (int l = 0; l <= 4; ++l) CHECK(mu.data[static_cast<std::size_t>(t * 5 + l)] == full.token[0](t, l));
}

TEST_CASE("a checkpoint resumes when only result-irrelevant keys differ (run.threads, output.file)", "[io][checkpoint]") {
  const std::string path = (fs::temp_directory_path() / "rcsim_test_threads.h5.partial").string();
  fs::remove(path);
  const std::map<std::string, std::string> base = {{"model.tokens", "5"}, {"model.dim", "3"}, {"model.layers", "4"},
                                                   {"run.trials", "4"}, {"run.threads", "1"}};
  const Config c = make_config(base);
  const RunResults full = run_simulation(prepare(c), 1);
  {
    RunResults saved = full;
    Checkpoint cp(path, c.to_ini(), {});
    cp.completed(saved, 1);
    cp.flush(saved);
  }
  auto changed = base;
  changed["run.threads"] = "3";
  changed["output.file"] = "elsewhere.h5";
  const Config other = make_config(changed);
  REQUIRE(other.to_ini() != c.to_ini());
  CHECK(result_configuration(other.to_ini()) == result_configuration(c.to_ini()));
  RunResults r = allocate_results(prepare(other));
  Checkpoint cp(path, other.to_ini(), {});
  CHECK(cp.load(r) == std::vector<char>{0, 1, 0, 0});
  CHECK(r.token[0].row(1) == full.token[0].row(1));
  // The stored hash is FNV-1a of the result-relevant configuration.
  CHECK(h5::File::open_read(path).attr_string("config_hash") == text_hash(result_configuration(c.to_ini())));
  cp.remove();
}

TEST_CASE("text_hash is 64-bit FNV-1a", "[io][checkpoint]") {
  // Reference values of the FNV-1a test suite (Fowler/Noll/Vo, isthe.com/chongo/tech/comp/fnv).
  CHECK(text_hash("") == "cbf29ce484222325");
  CHECK(text_hash("a") == "af63dc4c8601ec8c");
  CHECK(text_hash("foobar") == "85944171f73967e8");
}

TEST_CASE("result_configuration drops run.threads and output.file only", "[io][checkpoint]") {
  const std::string ini = "[run]\ntrials = 4\nthreads = 2\n[output]\nfile = a.h5\nspectrum = true\n[other]\nthreads = 1\n";
  CHECK(result_configuration(ini) == "[run]\ntrials = 4\n[output]\nspectrum = true\n[other]\nthreads = 1\n");
}

TEST_CASE("a checkpoint that cannot be written is an error that names it, and the run stops", "[io][checkpoint]") {
  const std::string path = (fs::temp_directory_path() / "rcsim_no_such_dir" / "x.h5.partial").string();
  fs::remove_all(fs::temp_directory_path() / "rcsim_no_such_dir");
  const Config c = make_config({{"model.tokens", "4"}, {"model.dim", "2"}, {"model.layers", "2"}, {"run.trials", "2"}});
  RunResults full = run_simulation(prepare(c), 1);
  Checkpoint cp(path, c.to_ini(), {});
  cp.completed(full, 0);
  try {
    cp.flush(full);
    FAIL("no error");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Catch::Contains("cannot write the checkpoint '" + path + "'"));
  }
  CHECK_FALSE(fs::exists(path));
  CHECK_FALSE(cp.stored(0));  // not written: its data stay in memory
  CHECK_NOTHROW(cp.flush(full));  // no second attempt (the failure path of the run flushes again)
}

TEST_CASE("large data over the cap are flushed and freed during the run, and the run file reads them back bitwise", "[io][checkpoint][memory]") {
  const fs::path dir = fs::temp_directory_path() / "rcsim_test_cap";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "run.h5.partial").string();
  const Config c = make_config({{"model.tokens", "6"}, {"model.dim", "4"}, {"model.layers", "5"}, {"run.trials", "12"},
                                {"output.spectrum", "true"}, {"output.tokens", "all"}, {"output.attention", "true"},
                                {"run.threads", "2"}});
  const EngineSetup s = prepare(c);
  const RunResults full = run_simulation(s, 2);
  // A cap of two and a half trials' large data: a flush after every third trial.
  const double trial_bytes = trial_large_bytes(s.config);
  REQUIRE(trial_bytes == 8.0 * (6 * 4 + 6 * 6 * 4 + 5 * 6 * 6));
  RunResults r = allocate_results(s);
  Checkpoint cp(path, c.to_ini(), {}, 1e9, 2.5 * trial_bytes);
  RunControl ctl;
  ctl.on_trial_done = [&](int t) { cp.completed(r, t); };
  run_trials(s, 2, r, {}, ctl);
  // Flushed by the cap alone (after the 3rd, 6th, 9th and 12th trial), each flush freeing them.
  for (int t = 0; t < 12; ++t) CHECK(cp.stored(t));
  cp.flush(r);  // as run_to_file does at the end (nothing pending here)
  for (int t = 0; t < 12; ++t) CHECK(same_large(r, cp, full, t));
  const std::string from_checkpoint = (dir / "a.h5").string(), from_memory = (dir / "b.h5").string();
  write_run_file(from_checkpoint, c.to_ini(), s, r, {"test", 2}, {}, &cp);
  write_run_file(from_memory, c.to_ini(), s, full, {"test", 2}, {});
  const h5::File a = h5::File::open_read(from_checkpoint), b = h5::File::open_read(from_memory);
  for (const char* name : {"tokens", "attention", "metrics/spectrum", "metrics/mu", "summary/mu_mean"})
    CHECK(same_bits(a.read(name).data, b.read(name).data));
  cp.remove();
  fs::remove_all(dir);
}

TEST_CASE("a partial trial group of a loaded checkpoint is recomputed and replaced, not read back", "[io][checkpoint]") {
  const std::string path = (fs::temp_directory_path() / "rcsim_test_partial_group.h5.partial").string();
  fs::remove(path);
  const Config c = make_config({{"model.tokens", "5"}, {"model.dim", "3"}, {"model.layers", "4"}, {"run.trials", "3"},
                                {"output.tokens", "all"}});
  const EngineSetup s = prepare(c);
  const RunResults full = run_simulation(s, 1);
  {
    RunResults saved = full;
    Checkpoint cp(path, c.to_ini(), {});
    for (int t : {0, 1}) cp.completed(saved, t);
    cp.flush(saved);
  }
  {  // trial 1's group without its snapshots and diagnostics (as a damaged checkpoint could have it)
    h5::File f = h5::File::open_readwrite(path, path);
    f.remove("trial_1/snapshots");
    f.remove("trial_1/diagnostics");
    f.close();
  }
  RunResults r = allocate_results(s);
  Checkpoint cp(path, c.to_ini(), {});
  const std::vector<char> done = cp.load(r);
  CHECK(done == std::vector<char>{1, 0, 0});
  RunControl ctl;
  ctl.on_trial_done = [&](int t) { cp.completed(r, t); };
  run_trials(s, 1, r, done, ctl);
  cp.flush(r);
  for (int t = 0; t < 3; ++t) {
    REQUIRE(cp.stored(t));
    CHECK(same_bits(cp.read_large(r, t, LargeData::snapshots), flat(full.snapshots[static_cast<std::size_t>(t)])));
  }
  cp.remove();
}

TEST_CASE("a measure with a token axis: checkpointed, resumed and written as [trial, layer, token]",
          "[io][checkpoint]") {
  // last_token_sensitivity has N values per recorded layer (MeasureShape::per_token): the checkpoint
  // stacks them as N rows of the layers, the run file stores [trial, layer, token] and its summary
  // [layer, token] (statistics over trials of each entry).
  const std::string out = (fs::temp_directory_path() / "rcsim_test_token_axis.h5").string();
  fs::remove(out);
  const int N = 5, T = 4;
  const Config c = make_config({{"model.tokens", "5"}, {"model.dim", "3"}, {"model.layers", "4"},
                                {"run.trials", "4"}, {"output.schedule", "list:0 1 4"}, {"mask.type", "causal"},
                                {"output.measures", "last_token_sensitivity,jacobian_log_spec2,clusters"},
                                {"output.file", out}});
  const RunResults full = run_simulation(prepare(c), 1);
  std::size_t m = 0;
  while (std::string(full.token_info[m].name) != "last_token_sensitivity") ++m;
  REQUIRE(full.token[m].cols() == 3 * N);
  REQUIRE(full.token[m].allFinite());
  {
    RunResults saved = full;
    Checkpoint cp(out + ".partial", c.to_ini(), {});
    cp.completed(saved, 1);
    cp.completed(saved, 2);
    cp.flush(saved);
    RunResults loaded = allocate_results(prepare(c));
    Checkpoint again(out + ".partial", c.to_ini(), {});
    CHECK(again.load(loaded) == std::vector<char>{0, 1, 1, 0});
    CHECK(loaded.token[m].row(2) == full.token[m].row(2));
  }
  run_to_file(c, {"test", 1}, nullptr, false);
  CHECK_FALSE(fs::exists(out + ".partial"));
  const h5::File f = h5::File::open_read(out);
  const h5::Array a = f.read("metrics/last_token_sensitivity");
  CHECK(a.shape == Extents{4, 3, 5});
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < N; ++i)
        CHECK(a.data[static_cast<std::size_t>((t * 3 + k) * N + i)] == full.token[m](t, k * N + i));
  const h5::Array mean = f.read("summary/last_token_sensitivity_mean");
  CHECK(mean.shape == Extents{3, 5});
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < N; ++i)
      CHECK(mean.data[static_cast<std::size_t>(k * N + i)] == Approx(full.token[m].col(k * N + i).mean()).epsilon(1e-14));
  CHECK(f.read("metrics/token").shape == Extents{5});
  CHECK(f.read("metrics/jacobian_log_spec2").shape == Extents{4, 3});  // the scalar measures as before
  CHECK(f.read("metrics/mu").shape == Extents{4, 3});
  fs::remove(out);
}
