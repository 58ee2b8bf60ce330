// Issue 22 at the unit level, table-driven: the checked reader (every stored type and shape of an
// attribute against what is expected), the final rename (a target that appeared or was swapped
// during the run is never replaced), the lock (never through a hard link), stale temporaries
// (only our own or provably rcsim's). The CLI-level cases are in tests/hostile/issue22.py and
// tests/hostile/fuzz_files.py.
#include <catch2/catch.hpp>

#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "kernel/support/errors.hpp"
#include "io/safe_file.hpp"
#include "io/hdf5_file.hpp"

#include "../cli_support.hpp"

using namespace rcsim;
namespace fs = std::filesystem;

namespace {
using test::fresh_dir;
using test::write_text;
using test::read_text;
using test::message_of;

// Attribute `name` on the root of a new file, written with the C API: `type`, `dims` (empty:
// scalar; {0xFFFF}: a null dataspace) and the bytes at `data`.
void write_attr(const fs::path& file, const char* name, hid_t type, const std::vector<hsize_t>& dims, const void* data) {
  const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const bool null = dims.size() == 1 && dims[0] == 0xFFFF;
  const hid_t space = null ? H5Screate(H5S_NULL) : dims.empty() ? H5Screate(H5S_SCALAR)
                                                               : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t a = H5Acreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (!null) H5Awrite(a, type, data);
  H5Aclose(a);
  H5Sclose(space);
  H5Fclose(f);
}
}  // namespace

TEST_CASE("the checked reader: every stored type and shape of an attribute, against what is expected", "[hostile][io]") {
  const fs::path d = fresh_dir("rcsim_issue22_attrs");
  const std::int64_t ints[4] = {1, 1, 1, 1};
  const double doubles[2] = {0.5, 0.5};
  const char* strs[3] = {"rcsim-run", "rcsim-run", "rcsim-run"};
  const hid_t vstr = H5Tcopy(H5T_C_S1);  // ASCII: as HDF5 tools write it
  H5Tset_size(vstr, H5T_VARIABLE);
  const hid_t fstr = H5Tcopy(H5T_C_S1);
  H5Tset_size(fstr, 9);
  struct Row {
    const char* what;
    hid_t type;
    std::vector<hsize_t> dims;
    const void* data;
    int read;  // 0: attr_string, 1: attr_int, 2: attr_double
    const char* expected;  // empty: reads fine
  };
  const std::vector<Row> rows = {
      {"scalar int as int", H5T_NATIVE_INT64, {}, ints, 1, ""},
      {"scalar int as number", H5T_NATIVE_INT64, {}, ints, 2, ""},
      {"scalar string", vstr, {}, strs, 0, ""},
      {"fixed-length string", fstr, {}, "rcsim-run", 0, ""},
      {"1-D int array", H5T_NATIVE_INT64, {2}, ints, 1, "attribute 'a' is a 1-D array [2] of integers, expected a scalar integer"},
      {"2-D int array", H5T_NATIVE_INT64, {2, 2}, ints, 1, "is a 2-D array [2, 2] of integers, expected a scalar integer"},
      {"1-D string array", vstr, {3}, strs, 0, "is a 1-D array [3] of strings, expected a scalar string"},
      {"fixed-length string array", fstr, {2}, "rcsim-runrcsim-run", 0, "is a 1-D array [2] of strings"},
      {"string as int", vstr, {}, strs, 1, "is a scalar string, expected a scalar integer"},
      {"int as string", H5T_NATIVE_INT64, {}, ints, 0, "is a scalar integer, expected a scalar string"},
      {"float as int", H5T_NATIVE_DOUBLE, {}, doubles, 1, "is a scalar float, expected a scalar integer"},
      {"float as string", H5T_NATIVE_DOUBLE, {}, doubles, 0, "is a scalar float, expected a scalar string"},
      {"float array as number", H5T_NATIVE_DOUBLE, {2}, doubles, 2, "is a 1-D array [2] of floats, expected a scalar number"},
      {"empty int", H5T_NATIVE_INT64, {0xFFFF}, nullptr, 1, "is an empty (null) integer, expected a scalar integer"},
      {"empty string", vstr, {0xFFFF}, nullptr, 0, "is an empty (null) string"},
      {"zero-length array", H5T_NATIVE_INT64, {0}, ints, 1, "is a 1-D array [0] of integers"},
  };
  for (const Row& r : rows) {
    INFO(r.what);
    const fs::path file = d / "a.h5";
    write_attr(file, "a", r.type, r.dims, r.data);
    const h5::File f = h5::File::open_read(file.string());
    const auto read = [&] {
      if (r.read == 0) (void)f.attr_string("a");
      if (r.read == 1) (void)f.attr_int("a");
      if (r.read == 2) (void)f.attr_double("a");
    };
    const std::string msg = message_of(read);
    if (std::string(r.expected).empty()) {
      CHECK(msg.empty());
    } else {
      CHECK_THAT(msg, Catch::Contains(r.expected) && Catch::Contains(file.string() + ":/"));
      CHECK_THROWS_AS(read(), UsageError);
    }
  }
  H5Tclose(vstr);
  H5Tclose(fstr);
  // A missing attribute names itself too.
  const h5::File f = h5::File::open_read((d / "a.h5").string());
  CHECK_THAT(message_of([&] { (void)f.attr_int("none"); }), Catch::Contains("attribute 'none' is missing"));
}

TEST_CASE("the final rename never replaces a target that is not the one rcsim started with", "[hostile][safety]") {
  const fs::path d = fresh_dir("rcsim_issue22_rename");
  const std::string target = (d / "out.h5").string();
  struct Row {
    const char* what;
    bool exists_at_start;
    std::function<void()> during;  // what happens to the target while the temporary is written
    bool refused;
  };
  const std::vector<Row> rows = {
      {"absent, stays absent", false, [] {}, false},
      {"absent, appears", false, [&] { write_text(target, "someone else's"); }, true},
      {"absent, a symlink appears", false, [&] { fs::create_symlink(d / "victim", target); }, true},
      {"present, unchanged", true, [] {}, false},
      {"present, removed", true, [&] { fs::remove(target); }, false},
      {"present, swapped for another file", true,
       [&] {
         write_text(d / "other", "someone else's");
         fs::rename(d / "other", target);
       },
       true},
  };
  for (const Row& r : rows) {
    INFO(r.what);
    fs::remove(target);
    write_text(d / "victim", "precious");
    if (r.exists_at_start) write_text(target, "old result");
    const std::string tmp = create_temporary(target);
    write_text(tmp, "new result");
    r.during();
    const std::string before = fs::exists(fs::symlink_status(target)) && !fs::is_symlink(target) ? read_text(target) : "";
    if (r.refused) {
      CHECK_THAT(message_of([&] { replace_with(tmp, target); }), Catch::Contains("appeared or was replaced while rcsim was writing it"));
      if (!before.empty()) CHECK(read_text(target) == before);
      CHECK(read_text(d / "victim") == "precious");
      remove_quietly(tmp);
    } else {
      CHECK_NOTHROW(replace_with(tmp, target));
      CHECK(read_text(target) == "new result");
      CHECK_FALSE(fs::exists(tmp));
    }
  }
}

TEST_CASE("a lock never writes through a hard link, stale temporaries only if ours or provably rcsim's", "[hostile][safety]") {
  const fs::path d = fresh_dir("rcsim_issue22_lock");
  write_text(d / "victim", "precious");
  fs::create_hard_link(d / "victim", d / "out.h5.lock");
  CHECK_THAT(message_of([&] { ExclusiveLock lock((d / "out.h5.lock").string(), "output 'out.h5'"); }),
             Catch::Contains("is not rcsim's (it has 2 hard links)"));
  CHECK(read_text(d / "victim") == "precious");
  fs::remove(d / "out.h5.lock");

  const std::string target = (d / "out.h5").string();
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
  struct Row {
    const char* name;
    std::function<void(const fs::path&)> make;
    bool removed;
  };
  const std::vector<Row> rows = {
      {".out.h5.Aaaaaa.tmp", [&](const fs::path& p) { write_text(p, ""); fs::last_write_time(p, old); }, true},
      {".out.h5.Bbbbbb.tmp", [&](const fs::path& p) { write_text(p, "foreign"); fs::last_write_time(p, old); }, false},
      {".out.h5.Cccccc.tmp", [&](const fs::path& p) { fs::create_hard_link(d / "victim", p); fs::last_write_time(p, old); }, false},
      {".out.h5.Dddddd.tmp", [&](const fs::path& p) { fs::create_symlink(d / "victim", p); }, false},
      {".out.h5.Eeeeee.tmp", [&](const fs::path& p) { fs::create_directory(p); }, false},
      {".out.h5.Ffffff.tmp",
       [&](const fs::path& p) {
         h5::File f = h5::File::create(p.string());
         f.set_attr("filetype", "rcsim-run");
         f.set_attr("complete", 0);
         f.close();
         fs::last_write_time(p, old);
       },
       true},
      {".out.h5.Gggggg.tmp",
       [&](const fs::path& p) {
         h5::File f = h5::File::create(p.string());
         f.set_attr("filetype", "someone-else");
         f.close();
         fs::last_write_time(p, old);
       },
       false},
  };
  for (const Row& r : rows) r.make(d / r.name);
  const std::string own = create_temporary(target);
  write_text(own, "ours, written just now");
  {
    const ExclusiveLock lock(lock_path_for(target), "output 'out.h5'");
    remove_stale_temporaries(target);
  }
  CHECK_FALSE(fs::exists(own));
  for (const Row& r : rows) {
    INFO(r.name);
    CHECK(fs::exists(fs::symlink_status(d / r.name)) == !r.removed);
  }
  CHECK(read_text(d / "victim") == "precious");
}
