// HDF5 layer, run files, input files, reproducibility and thread-count invariance.
#include <catch2/catch.hpp>

#include "app/run.hpp"
#include "io/inputs.hpp"
#include "cli_support.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "config/config.hpp"
#include "kernel/support/errors.hpp"
#include "io/hdf5_file.hpp"
#include "io/run_file.hpp"
#include "kernel/model/mask_ranges.hpp"
#include "kernel/trial/simulation.hpp"

using namespace rcsim;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using test::temp_path;

namespace {

void write_array(const std::string& file, const std::string& name, const std::vector<hsize_t>& shape,
                 const std::vector<double>& data) {
  const h5::File f = fs::exists(file) ? h5::File::open_readwrite(file, file) : h5::File::create(file);
  f.write(name, shape, data.data());
}
}  // namespace

TEST_CASE("HDF5 round trip of a non-square matrix keeps C order", "[io]") {
  const std::string file = temp_path("rcsim_test_roundtrip.h5");
  RowMajorMatrix m(2, 3);
  m << 1, 2, 3, 4, 5, 6;
  {
    const h5::File f = h5::File::create(file);
    f.write("m", {2, 3}, m.data());
    f.set_attr("note", "ünïcode");
    f.set_attr("count", 7);
  }
  const h5::File f = h5::File::open_read(file);
  const h5::Array a = f.read("m");
  CHECK(a.shape == std::vector<hsize_t>{2, 3});
  CHECK(a.data == std::vector<double>{1, 2, 3, 4, 5, 6});  // row-major: row 0 first
  const RowMajorMatrix back = f.read_matrix("m", {2, 3});
  CHECK(back == m);
  // Through a column-major Eigen matrix, the element (1, 0) stays (1, 0).
  const Matrix col_major = back;
  CHECK(col_major(1, 0) == 4.0);
  CHECK(f.attr_string("note") == "ünïcode");
  CHECK(f.attr_int("count") == 7);
  CHECK_THROWS_WITH(f.read_matrix("m", {3, 2}), Contains("expected shape [3, 2], got [2, 3]"));
  CHECK_THROWS_WITH(f.read("missing"), Contains("missing"));
}

TEST_CASE("a run file has the contracted layout", "[io]") {
  const std::string out = temp_path("rcsim_test_run/layout.h5");
  fs::remove_all(fs::path(out).parent_path());
  const Config c = make_config({{"model.tokens", "5"}, {"model.dim", "3"}, {"model.layers", "4"},
                                {"run.trials", "3"}, {"output.file", out}, {"output.spectrum", "true"},
                                {"output.tokens", "0,4"}, {"mask.type", "causal"}, {"norm.type", "layernorm"}});
  run_to_file(c, {"test", 1}, nullptr, false);
  REQUIRE(fs::exists(out));
  CHECK_FALSE(fs::exists(out + ".tmp"));
  const h5::File f = h5::File::open_read(out);
  CHECK(f.attr_string("filetype") == "rcsim-run");
  CHECK(f.attr_int("complete") == 1);
  CHECK(f.attr_int("max_rank") == 2);  // layernorm without bias: min(N, d - 1)
  CHECK(f.read("metrics/mu").shape == std::vector<hsize_t>{3, 5});
  CHECK(f.read("metrics/attn_min").shape == std::vector<hsize_t>{3, 4});
  CHECK(f.read("metrics/spectrum").shape == std::vector<hsize_t>{3, 5, 3});
  CHECK(f.read("tokens").shape == std::vector<hsize_t>{3, 2, 5, 3});
  CHECK(f.read("tokens_layer").data == std::vector<double>{0, 4});
  CHECK(f.read("summary/log10_mu_median").shape == std::vector<hsize_t>{5});
  CHECK(f.read("summary/full_rank_fraction").shape == std::vector<hsize_t>{5});
  CHECK(f.read("mask").data == std::vector<double>{1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1});
}

// HDF5 refuses an attribute over 64 KiB: the complete mask's N centres went there and a run with
// N > 8190 computed everything, then failed writing its file (issue 24's n = 10^4 runs).
TEST_CASE("a mask with more than 4096 centres stores them in /mask_centres", "[io]") {
  const std::string out = temp_path("rcsim_test_centres/centres.h5");
  fs::remove_all(fs::path(out).parent_path());
  const int n = 4100;
  const Config c = make_config({{"model.tokens", std::to_string(n)}, {"model.dim", "2"}, {"model.layers", "1"},
                                {"run.trials", "1"}, {"output.file", out}});
  run_to_file(c, {"test", 1}, nullptr, false);
  const h5::File f = h5::File::open_read(out);
  CHECK(f.attr_int("complete") == 1);
  const h5::Dataset mask = f.open_dataset("mask");
  CHECK_FALSE(mask.has_attr("centres"));
  const auto centres = f.read("mask_centres");
  REQUIRE(centres.shape == std::vector<hsize_t>{static_cast<hsize_t>(n)});
  for (int i = 0; i < n; ++i) CHECK(centres.data[static_cast<std::size_t>(i)] == i);  // complete: every token
  // a causal mask has one centre (token 0): still the attribute
  const Config causal = make_config({{"model.tokens", std::to_string(n)}, {"model.dim", "2"}, {"model.layers", "1"},
                                     {"run.trials", "1"}, {"output.file", out + "-causal.h5"}, {"mask.type", "causal"}});
  run_to_file(causal, {"test", 1}, nullptr, false);
  const h5::File g = h5::File::open_read(out + "-causal.h5");
  CHECK(g.open_dataset("mask").has_attr("centres"));
  CHECK_FALSE(g.exists("mask_centres"));
}

// The cpu platform keeps the built-in masks as ranges and writes /mask a block of rows at a time
// (io/run_file.hpp's write_mask_rows): the values of the dense mask, whatever the blocks.
TEST_CASE("/mask from the row ranges equals the dense mask, in blocks of rows", "[io]") {
  const std::string file = temp_path("rcsim_test_mask_rows.h5");
  for (const int n : {1, 37, 300})  // 300: several chunks of rows (HDF5 chunks of 218 rows)
    for (const std::size_t block_bytes : {std::size_t{1}, std::size_t{1} << 22}) {
      INFO("N = " << n << ", block of " << block_bytes << " bytes");
      const MaskRanges ranges = builtin_mask_ranges(MaskType::sliding_window, n, 20);
      {
        const h5::File f = h5::File::create(file);
        write_mask_rows(f, mask_rows(ranges), block_bytes);
      }
      const h5::File f = h5::File::open_read(file);
      const RowMajorMatrix back = f.read_matrix("mask", {n, n});
      CHECK(back == sliding_window_mask(n, 20).cast<double>());
    }
  // A run on the cpu platform (no dense mask) and on the reference: the same /mask and graph.
  const std::string out = temp_path("rcsim_test_mask_platforms.h5");
  std::vector<h5::Array> masks;
  std::vector<std::vector<std::int64_t>> graphs;
  for (const char* platform : {"reference", "cpu"}) {
    const Config c = make_config({{"model.tokens", "41"}, {"model.dim", "3"}, {"model.layers", "2"},
                                  {"run.trials", "1"}, {"mask.type", "unidirectional_sliding_window"},
                                  {"mask.window", "6"}, {"run.platform", platform}, {"output.file", out}});
    std::filesystem::remove(out);
    run_to_file(c, {"test", 1}, nullptr, false);
    const h5::File f = h5::File::open_read(out);
    const h5::Dataset mask = f.open_dataset("mask");
    masks.push_back(f.read("mask"));
    graphs.push_back({mask.attr_int("radius"), mask.attr_int("quasi_strongly_connected")});
  }
  CHECK(masks[0].data == masks[1].data);
  const RowMajorMatrix expected = unidirectional_sliding_window_mask(41, 6).cast<double>();
  CHECK(masks[1].data == std::vector<double>(expected.data(), expected.data() + expected.size()));
  CHECK(graphs[0] == graphs[1]);
  CHECK(graphs[1] == std::vector<std::int64_t>{7, 1});  // ceil(40 / 6)
}

TEST_CASE("the stored configuration reproduces the run bit for bit", "[io]") {
  const std::string out = temp_path("rcsim_test_repro.h5");
  const Config c = make_config({{"model.tokens", "6"}, {"model.dim", "4"}, {"model.layers", "5"},
                                {"run.trials", "4"}, {"output.file", out}, {"norm.type", "rmsnorm"},
                                {"model.heads", "2"}, {"model.d_qk", "0.3"}});
  run_to_file(c, {"test", 1}, nullptr, false);
  const h5::File f = h5::File::open_read(out);
  const std::string ini = f.read_string("config");
  const std::string ini_path = temp_path("rcsim_test_repro.ini");
  std::ofstream(ini_path) << ini;
  const Config again = make_config(parse_config_sources({}, ini_path).values);
  const RunResults r = run_simulation(prepare(again), 2);
  const h5::Array mu = f.read("metrics/mu");
  for (int t = 0; t < 4; ++t)
    for (int l = 0; l <= 5; ++l) CHECK(r.token[0](t, l) == mu.data[static_cast<std::size_t>(t * 6 + l)]);
}

TEST_CASE("results are bitwise identical for 1 and 2 threads", "[io]") {
  const Config c = make_config({{"model.tokens", "7"}, {"model.dim", "5"}, {"model.layers", "9"},
                                {"run.trials", "11"}, {"norm.type", "sphere"}, {"weights.v", "orthogonal"},
                                {"output.spectrum", "true"}});
  const EngineSetup s = prepare(c);
  const RunResults a = run_simulation(s, 1), b = run_simulation(s, 2);
  for (std::size_t m = 0; m < a.token.size(); ++m) CHECK(a.token[m].cwiseEqual(b.token[m]).all());
  for (std::size_t m = 0; m < a.attention.size(); ++m) CHECK(a.attention[m].cwiseEqual(b.attention[m]).all());
  for (std::size_t t = 0; t < a.spectrum.size(); ++t) CHECK(a.spectrum[t] == b.spectrum[t]);
  SECTION("and different seeds give different trials") {
    Config c2 = c;
    c2.run.seed += 1;
    CHECK(run_simulation(prepare(c2), 1).token[0](0, 0) != a.token[0](0, 0));
  }
}

TEST_CASE("input files: X0, weights and custom masks", "[io]") {
  const std::string file = temp_path("rcsim_test_inputs.h5");
  fs::remove(file);
  // X0 [N, d] = rows (1, 0), (0, 1), (1, 1); W_V = identity per layer; causal custom mask.
  write_array(file, "X0", {3, 2}, {1, 0, 0, 1, 1, 1});
  write_array(file, "W_V", {2, 2}, {1, 0, 0, 1});
  write_array(file, "mask", {3, 3}, {1, 0, 0, 1, 1, 0, 1, 1, 1});
  const std::map<std::string, std::string> base = {
      {"model.tokens", "3"}, {"model.dim", "2"}, {"model.layers", "1"}, {"run.trials", "1"},
      {"init.type", "file"}, {"init.file", file}, {"weights.v", "file"}, {"weights.file", file},
      {"weights.q", "zero"}, {"weights.k", "zero"}, {"mask.type", "custom"}, {"mask.file", file},
      {"output.tokens", "all"}};
  const RunResults r = run_simulation(prepare(make_config(base)), 1);
  // Uniform causal attention with identity W_V: token 2 becomes the mean of all three.
  const Matrix& X1 = r.snapshots[0][1];
  CHECK(X1(0, 0) == 1.0);
  CHECK(X1(1, 0) == 0.5);
  CHECK(X1(2, 1) == Approx(2.0 / 3.0));

  SECTION("a wrong shape names the dataset, the expected and the actual shape") {
    auto v = base;
    v["model.dim"] = "3";
    v["weights.v"] = "identity";
    CHECK_THROWS_WITH(prepare(make_config(v)), Contains("/mask") || Contains("X0"));
    v["mask.type"] = "complete";
    CHECK_THROWS_AS(prepare(make_config(v)), UsageError);
    CHECK_THROWS_WITH(prepare(make_config(v)), Contains("dataset /X0 has shape [3, 2], expected [3, 3] or [1, 3, 3]"));
  }
  SECTION("a missing dataset is named") {
    auto v = base;
    v["weights.q"] = "file";
    CHECK_THROWS_WITH(prepare(make_config(v)), Contains("W_Q"));
  }
  SECTION("a missing file is named") {
    auto v = base;
    v["init.file"] = "/nonexistent/x0.h5";
    CHECK_THROWS_AS(prepare(make_config(v)), UsageError);
    CHECK_THROWS_WITH(prepare(make_config(v)), Contains("/nonexistent/x0.h5"));
  }
  SECTION("a non-finite value names the key, the file and the dataset") {
    const std::string nan_file = temp_path("rcsim_test_nan_weights.h5");
    fs::remove(nan_file);
    write_array(nan_file, "W_V", {2, 2}, {1, 0, std::nan(""), 1});
    auto v = base;
    v["weights.file"] = nan_file;
    CHECK_THROWS_AS(prepare(make_config(v)), UsageError);
    CHECK_THROWS_WITH(prepare(make_config(v)), Contains("weights.file '" + nan_file + "': dataset /W_V holds a non-finite value") &&
                                                   Contains("at flat index 2"));
  }
  SECTION("a custom mask without self-loops is rejected") {
    const std::string bad = temp_path("rcsim_test_badmask.h5");
    fs::remove(bad);
    write_array(bad, "mask", {3, 3}, {1, 0, 0, 1, 0, 0, 1, 1, 1});
    auto v = base;
    v["mask.file"] = bad;
    CHECK_THROWS_WITH(prepare(make_config(v)), Contains("self-loop"));
  }
}

TEST_CASE("an unwritable output leaves nothing behind", "[io]") {
  const Config c = make_config({{"output.file", "/proc/rcsim_cannot_write_here/x.h5"}, {"model.layers", "2"}});
  CHECK_THROWS_AS(run_to_file(c, {"test", 1}, nullptr, false), UsageError);
  const std::string out = temp_path("rcsim_test_fail.h5");
  fs::remove(out);
  const Config bad = make_config({{"output.file", out}, {"init.type", "file"}, {"init.file", "/nonexistent.h5"}});
  CHECK_THROWS(run_to_file(bad, {"test", 1}, nullptr, false));
  CHECK_FALSE(fs::exists(out));
  CHECK_FALSE(fs::exists(out + ".tmp"));
}

TEST_CASE("non-finite tokens stop the trial and are reported, not silent", "[io]") {
  // W_V = 1e200 I without normalisation overflows after two layers.
  const Config c = make_config({{"model.tokens", "3"}, {"model.dim", "2"}, {"model.layers", "5"},
                                {"weights.v", "fixed"}, {"weights.v_matrix", "1e200 0; 0 1e200"},
                                {"run.trials", "1"}});
  const RunResults r = run_simulation(prepare(c), 1);
  CHECK(r.nonfinite_layer[0] == 2);
  CHECK(std::isnan(r.token[0](0, 3)));
  CHECK(std::isfinite(r.token[0](0, 1)));
}

TEST_CASE("underflow of mu is reported with its layer", "[io]") {
  // Uniform attention over all tokens with W_V = 1e-170 I: identical tokens after one layer
  // (mu = 0 up to round-off of 1e-170-sized numbers), then far below DBL_MIN.
  const Config c = make_config({{"model.tokens", "3"}, {"model.dim", "2"}, {"model.layers", "3"},
                                {"weights.q", "zero"}, {"weights.k", "zero"}, {"weights.v", "fixed"},
                                {"weights.v_matrix", "1e-170 0; 0 1e-170"}, {"run.trials", "1"}});
  const RunResults r = run_simulation(prepare(c), 1);
  CHECK(r.underflow_layer[0] >= 1);
  CHECK(r.underflow_layer[0] <= 2);
  CHECK(r.token[0].allFinite());
}

TEST_CASE("chunks stay bounded and never shrink to one value at any depth", "[io]") {
  using V = std::vector<hsize_t>;
  auto values = [](const V& c) {
    hsize_t n = 1;
    for (hsize_t x : c) n *= x;
    return n;
  };
  // Small arrays: one chunk (the whole array), as before.
  CHECK(h5::chunk_shape({64, 101}) == V{64, 101});
  CHECK(h5::chunk_shape({16, 9, 8, 4}) == V{16, 9, 8, 4});
  // A long last axis (a run of depth 10^5 and 10^6, 2 trials): chunks of 65536 values along it.
  CHECK(h5::chunk_shape({2, 100001}) == V{1, 65536});
  CHECK(h5::chunk_shape({2, 1000001}) == V{1, 65536});
  // Tokens [trials, layers, N, d] of a large run: whole token matrices, as many as fit.
  CHECK(h5::chunk_shape({4, 1000, 64, 32}) == V{1, 32, 64, 32});
  // One token matrix larger than the target: rows of it.
  CHECK(h5::chunk_shape({1, 1, 4096, 64}) == V{1, 1, 1024, 64});
  for (const V& s : {V{3, 70000}, V{5, 7, 300000}, V{100, 100, 100}, V{1, 1}, V{65537}}) {
    const V c = h5::chunk_shape(s);
    INFO(s.size());
    CHECK(values(c) <= 65536);
    CHECK(values(c) >= std::min<hsize_t>(values(s), 32768));  // never a sliver
    for (std::size_t i = 0; i < s.size(); ++i) CHECK((c[i] >= 1 && c[i] <= s[i]));
  }
  // Written and read back: a deep dataset (2 x 200000) keeps its values and its chunks are bounded.
  const std::string file = temp_path("chunks.h5");
  fs::remove(file);  // a previous run's file holds a dataset of this name
  std::vector<double> data(400000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<double>(i) * 0.5;
  write_array(file, "deep", {2, 200000}, data);
  const h5::File f = h5::File::open_read(file, file);
  CHECK(f.read("deep").data == data);
  hid_t ds = H5Dopen2(f.id(), "deep", H5P_DEFAULT);
  hid_t plist = H5Dget_create_plist(ds);
  hsize_t chunk[2] = {0, 0};
  REQUIRE(H5Pget_chunk(plist, 2, chunk) == 2);
  CHECK(chunk[0] == 1);
  CHECK(chunk[1] == 65536);
  H5Pclose(plist);
  H5Dclose(ds);
}
