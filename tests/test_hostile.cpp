// Hostile input, unit level (issue 10): the echo helper, configuration-file checks, HDF5 inputs
// that keep their values outside the file, work isolated in a child process, key scaling for
// GLPK, integer arithmetic on user values near INT_MAX. The CLI-level cases are in
// tests/hostile/hostile.py.
#include <catch2/catch.hpp>

#include <hdf5.h>

#include <climits>
#include <csignal>
#include <unistd.h>
#include <thread>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "config/config.hpp"
#include "kernel/support/errors.hpp"
#include "io/isolated.hpp"
#include "kernel/support/printable.hpp"
#include "geometry/selectability.hpp"
#include "io/hdf5_file.hpp"
#include "kernel/model/mask.hpp"

#include "cli_support.hpp"

using namespace rcsim;
namespace fs = std::filesystem;

namespace {
using test::fresh_dir;
using test::message_of;
void write_bytes(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
}  // namespace

TEST_CASE("printable escapes control characters and invalid UTF-8, keeps valid UTF-8", "[hostile]") {
  CHECK(printable("plain text 1.5e-3") == "plain text 1.5e-3");
  CHECK(printable("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(printable("\x1b[31mred") == "\\e[31mred");
  CHECK(printable(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(printable("bell\x07 del\x7f") == "bell\\x07 del\\x7F");
  CHECK(printable("\xce\xbc = 1, caf\xc3\xa9") == "\xce\xbc = 1, caf\xc3\xa9");         // mu, e-acute: kept
  CHECK(printable("\xff\xfe") == "\\xFF\\xFE");                                          // never UTF-8
  CHECK(printable("\xc0\xaf") == "\\xC0\\xAF");                                          // overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xED\\xA0\\x80");                                 // a surrogate
  CHECK(printable("\xe2\x82") == "\\xE2\\x82");                                          // truncated sequence
  CHECK(printable("\xc2\x9b" "2J") == "\\u{009B}2J");                                    // C1 CSI
  CHECK(printable("x\xe2\x80\xaey") == "x\\u{202E}y");                                   // right-to-left override
  CHECK(printable("back\\slash") == "back\\slash");                                      // idempotent
}

TEST_CASE("printable cuts long text at the limit and says how long it was", "[hostile]") {
  const std::string big(10000, 'a');
  const std::string out = printable(big);
  CHECK(out == std::string(kEchoLimit, 'a') + "... (10000 bytes)");
  CHECK(printable(std::string(200, 'b')) == std::string(200, 'b'));  // exactly at the limit: whole
  // A multi-byte character is never cut in half: 3 + 2 bytes with limit 4 keeps "abc" only.
  CHECK(printable("abc\xc3\xa9", 4) == "abc... (5 bytes)");
  // Idempotent on short text: a message built from escaped values can pass through again.
  const std::string once = printable("a\x01\xff\n");
  CHECK(printable(once) == once);
}

TEST_CASE("a configuration file: BOM skipped, duplicate keys named with both lines, directory refused", "[hostile][config]") {
  const fs::path d = fresh_dir("rcsim_hostile_config");
  write_bytes(d / "bom.ini", "\xef\xbb\xbf[model]\ntokens = 5\n");
  const ParsedArgs p = parse_config_sources({}, (d / "bom.ini").string());
  CHECK(p.values.at("model.tokens") == "5");

  write_bytes(d / "dup.ini", "# comment\n[model]\ntokens = 3\n[run]\ntrials = 2\n[model]\ntokens = 4\n");
  const std::string f = (d / "dup.ini").string();
  const std::string msg = message_of([&] { parse_config_sources({}, f); });
  CHECK(msg.find("key 'model.tokens' is given twice (" + f + ":3 and " + f + ":7)") != std::string::npos);
  CHECK_THROWS_AS(parse_config_sources({}, f), UsageError);

  // The same name in two sections is two keys, and a comment line is not a key.
  write_bytes(d / "two.ini", "[model]\ntokens = 3\n[run]\n# tokens = 9\nseed = 1\n");
  CHECK_NOTHROW(parse_config_sources({}, (d / "two.ini").string()));

  const std::string dmsg = message_of([&] { parse_config_sources({}, d.string()); });
  CHECK(dmsg.find("is a directory") != std::string::npos);
  CHECK_THROWS_AS(parse_config_sources({}, d.string()), UsageError);
}

TEST_CASE("configuration errors escape what they echo", "[hostile][config]") {
  const std::string msg = message_of([] { make_config({{"model.tokens", "3\x1b[2J"}}); });
  CHECK(msg.find("'3\\e[2J'") != std::string::npos);
  CHECK(msg.find('\x1b') == std::string::npos);
  const std::string long_msg = message_of([] { make_config({{"model.tokens", std::string(100000, '7')}}); });
  CHECK(long_msg.size() < 400);
  CHECK(long_msg.find("... (100000 bytes)") != std::string::npos);
}

namespace {
// A file with dataset "X" [2, 3] whose values are in `raw` (external storage), via the C API.
void write_external(const fs::path& file, const fs::path& raw) {
  const double values[6] = {1, 2, 3, 4, 5, 6};
  write_bytes(raw, std::string(reinterpret_cast<const char*>(values), sizeof values));
  const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_external(dcpl, raw.filename().c_str(), 0, sizeof values);
  const hsize_t dims[2] = {2, 3};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t ds = H5Dcreate2(f, "X", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Dclose(ds);
  H5Sclose(space);
  H5Pclose(dcpl);
  H5Fclose(f);
}
}  // namespace

TEST_CASE("HDF5 inputs: external storage and groups refused, plain datasets read", "[hostile][io]") {
  const fs::path d = fresh_dir("rcsim_hostile_h5");
  write_external(d / "ext.h5", d / "secret.bin");
  {
    const h5::File f = h5::File::open_read((d / "ext.h5").string(), "init.file");
    const std::string msg = message_of([&] { f.read("X"); });
    CHECK(msg.find("stored outside the file (external storage in 'secret.bin')") != std::string::npos);
    CHECK_THROWS_AS(f.read("X"), UsageError);
    CHECK_THROWS_AS(f.read_matrix("X", {2, 3}), UsageError);
  }
  {
    h5::File f = h5::File::create((d / "plain.h5").string());
    const double v[2] = {0.5, -1.5};
    f.write("X", {2}, v);
    f.create_group("G");
    f.close();
  }
  const h5::File f = h5::File::open_read((d / "plain.h5").string());
  CHECK(f.read("X").data == std::vector<double>{0.5, -1.5});
  CHECK(message_of([&] { f.read("G"); }).find("G is a group, expected a dataset") != std::string::npos);
  CHECK(message_of([&] { f.read("none"); }).find("is missing") != std::string::npos);
  CHECK(message_of([&] { f.read("X/deeper"); }).find("is missing") != std::string::npos);
  // Not HDF5, truncated, missing: each its own message.
  write_bytes(d / "text.h5", "hello");
  CHECK(message_of([&] { h5::File::open_read((d / "text.h5").string(), "k"); }).find("is not an HDF5 file") != std::string::npos);
  {
    std::string bytes;
    std::ifstream in(d / "plain.h5", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
    write_bytes(d / "cut.h5", bytes.substr(0, 1000));
  }
  CHECK(message_of([&] { h5::File::open_read((d / "cut.h5").string()); }).find("truncated or corrupted") != std::string::npos);
  CHECK(message_of([&] { h5::File::open_read((d / "none.h5").string()); }).find("no such file") != std::string::npos);
}

TEST_CASE("run_isolated: results, errors and crashes of the child", "[hostile]") {
  int here = 0;
  run_isolated([&] { here = 1; }, "work");  // the child's memory is its own
  CHECK(here == 0);
  CHECK_THROWS_AS(run_isolated([] { throw UsageError("bad key"); }, "work"), UsageError);
  CHECK(message_of([] { run_isolated([] { throw UsageError("bad key"); }, "work"); }) == "bad key");
  CHECK(message_of([] { run_isolated([] { throw std::runtime_error("disk"); }, "work"); }) == "work: disk");
  // A child killed by a signal (SIGKILL: no handler of Catch2 or a sanitizer can intercept it).
  const std::string crash = message_of([] { run_isolated([] { std::raise(SIGKILL); }, "reading 'x.h5'"); });
  CHECK(crash.find("reading 'x.h5' failed: the HDF5 library crashed on it (signal 9") != std::string::npos);
}

TEST_CASE("run_isolated stops a child that does not finish within its time limit", "[hostile]") {
  // A child that never ends (as libhdf5 looping on a corrupted file): stopped after 1 s.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string hang = message_of([] {
    run_isolated([] { for (;;) std::this_thread::sleep_for(std::chrono::seconds(1)); }, "reading 'x.h5'", 1.0);
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(hang.find("reading 'x.h5' failed: the HDF5 library did not finish within 1 s") != std::string::npos);
  CHECK(secs >= 1.0);
  CHECK(secs < 10.0);
  // A child that closes its end of the pipe and then hangs is stopped too.
  const std::string closed = message_of([] {
    run_isolated([] {
      for (int fd = 3; fd < 64; ++fd) ::close(fd);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }, "w", 0.5);
  });
  CHECK(closed.find("did not finish within 1 s") != std::string::npos);
  // Work that finishes in time is unaffected by the limit; the limit grows with the file.
  CHECK_NOTHROW(run_isolated([] {}, "work", 5.0));
  CHECK(isolated_time_limit("/nonexistent/file.h5") == 30.0);
}

TEST_CASE("selectability is scale invariant, also where GLPK alone would abort (keys above 1e155 or below 1e-165)", "[hostile][keys][glpk]") {
  std::mt19937_64 gen(7);
  std::normal_distribution<double> normal;
  Matrix K(9, 3);
  for (Eigen::Index i = 0; i < K.rows(); ++i)
    for (Eigen::Index j = 0; j < K.cols(); ++j) K(i, j) = normal(gen);
  K.row(8) = 0.25 * K.row(0) + 0.75 * K.row(1);  // inside the hull: unselectable
  const KeySelectability ref = analyse_keys(K);
  CHECK(ref.selectable[8] == 0);
  for (const double c : {1e160, 1e300, 1e-170, 1e-300}) {
    const KeySelectability s = analyse_keys(K * c);
    CHECK(s.selectable == ref.selectable);
    for (Eigen::Index i = 0; i < K.rows(); ++i) {
      if (!ref.selectable[static_cast<std::size_t>(i)]) continue;
      CHECK(s.margin(i) / c == Approx(ref.margin(i)).epsilon(1e-9));
      CHECK(s.scale(i) / c == Approx(ref.scale(i)).epsilon(1e-12));
    }
  }
}

TEST_CASE("sliding-window masks and the radius formula with a window near INT_MAX", "[hostile][mask]") {
  for (const int w : {INT_MAX, INT_MAX - 1}) {
    // A window wider than the sequence: the full (causal) mask, radius 1.
    CHECK(sliding_window_mask(5, w) == complete_mask(5));
    CHECK(unidirectional_sliding_window_mask(5, w) == causal_mask(5));
    CHECK(radius_formula(MaskType::sliding_window, 5, w) == 1);
    CHECK(radius_formula(MaskType::unidirectional_sliding_window, 5, w) == 1);
  }
  // Hand-worked: N = 10, w = 3: ceil(ceil(9/2)/3) = ceil(5/3) = 2 and ceil(9/3) = 3.
  CHECK(radius_formula(MaskType::sliding_window, 10, 3) == 2);
  CHECK(radius_formula(MaskType::unidirectional_sliding_window, 10, 3) == 3);
  CHECK(radius_formula(MaskType::unidirectional_sliding_window, 10, 4) == 3);
}
