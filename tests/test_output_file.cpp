// OutputFile (io/output_file.hpp): every file rcsim writes goes through it. Lock, exclusive
// temporary, header, complete flag, checked close, rename; and what happens when any step fails.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <vector>

#include "io/hdf5_file.hpp"
#include "io/output_file.hpp"
#include "kernel/support/errors.hpp"

#include "cli_support.hpp"

using namespace rcsim;
namespace fs = std::filesystem;

namespace {
using test::fresh_dir;
using test::read_text;
using test::write_text;

// Files in `d` other than the ones named: temporaries or locks left behind.
std::vector<std::string> leftovers(const fs::path& d, const std::vector<std::string>& expected) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(d)) {
    const std::string name = e.path().filename().string();
    bool known = false;
    for (const std::string& x : expected) known = known || name == x;
    if (!known) out.push_back(name);
  }
  return out;
}

// A file-size limit the test can set without root: writes beyond it fail with EFBIG ("File too
// large"), as on a full disk. SIGXFSZ is ignored while it holds.
struct FileSizeLimit {
  rlimit saved{};
  void (*saved_handler)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved);
    saved_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit r = saved;
    r.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &r);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, saved_handler);
  }
};
}  // namespace

TEST_CASE("an output file gets the header, its body and complete = 1, then replaces the target", "[io][output_file]") {
  const fs::path d = fresh_dir("rcsim_output_file_ok");
  const std::string out = (d / "sub" / "out.h5").string();  // the directory is created
  {
    OutputFile file(out, {"output.file", "output 'out.h5'"});
    CHECK(fs::exists(out + ".lock"));
    CHECK(fs::exists(file.temporary()));
    CHECK_FALSE(fs::exists(out));
    file.write_hdf5({"rcsim-test", 7, std::string("rcsim x")}, [](const h5::File& f) {
      CHECK(f.attr_int("complete") == 0);  // not complete while the body writes
      const double v[3] = {1, 2, 3};
      f.write("values", {3}, v);
    });
    CHECK_FALSE(fs::exists(file.temporary()));
  }
  CHECK(leftovers(d / "sub", {"out.h5"}).empty());  // no temporary, the lock released and removed
  const h5::File f = h5::File::open_read(out);
  CHECK(f.attr_string("filetype") == "rcsim-test");
  CHECK(f.attr_int("format_version") == 7);
  CHECK(f.attr_string("command_line") == "rcsim x");
  CHECK(f.attr_int("complete") == 1);
  for (const char* a : {"rcsim_version", "git_sha", "source_tree", "compiler", "build_type", "instruction_set",
                        "hdf5_version", "created_utc"})
    CHECK(f.has_attr(a));
}

TEST_CASE("a failed body or close leaves the old target and nothing else", "[io][output_file]") {
  const fs::path d = fresh_dir("rcsim_output_file_fail");
  const std::string out = (d / "out.h5").string();
  write_text(out, "the previous output");
  SECTION("the body throws") {
    OutputFile file(out, {"output.file", "output 'out.h5'"});
    CHECK_THROWS_WITH(file.write_hdf5({"rcsim-test", 1}, [](const h5::File&) { throw RuntimeError("body failed"); }),
                      Catch::Contains("body failed"));
  }
  SECTION("the disk is full at the close (a file-size limit)") {
    OutputFile file(out, {"output.file", "output 'out.h5'"});
    const FileSizeLimit limit(16 * 1024);
    const std::vector<double> big(1 << 17, 0.5);  // 1 MiB
    CHECK_THROWS_WITH(file.write_hdf5({"rcsim-test", 1},
                                      [&](const h5::File& f) { f.write("big", {big.size()}, big.data()); }),
                      Catch::Contains("File too large"));
  }
  SECTION("bytes beyond the limit") {
    OutputFile file(out, {"output.file", ""});
    const FileSizeLimit limit(1024);
    CHECK_THROWS_WITH(file.write_bytes(std::string(1 << 16, 'x')), Catch::Contains("File too large"));
  }
  CHECK(read_text(out) == "the previous output");
  CHECK(leftovers(d, {"out.h5"}).empty());
}

TEST_CASE("an output file never replaces what is not rcsim's", "[io][output_file]") {
  const fs::path d = fresh_dir("rcsim_output_file_foreign");
  const std::string out = (d / "out.h5").string();
  SECTION("a directory at the target is a usage error naming the key") {
    fs::create_directory(out);
    CHECK_THROWS_AS(OutputFile(out, {"output.file", ""}), UsageError);
    CHECK_THROWS_WITH(OutputFile(out, {"output.file", ""}), Catch::Contains("output.file"));
  }
  SECTION("a file that appears during the write is refused and kept") {
    OutputFile file(out, {"output.file", "output 'out.h5'"});
    write_text(out, "someone else's");
    CHECK_THROWS_WITH(file.write_bytes("ours"), Catch::Contains("appeared or was replaced"));
    CHECK(read_text(out) == "someone else's");
  }
  SECTION("a file replaced during the write is refused and kept") {
    write_text(out, "the old output");
    OutputFile file(out, {"output.file", ""});
    fs::rename(out, out + ".moved");  // kept, so that the new file cannot reuse its inode
    write_text(out, "a new file by someone else");
    CHECK_THROWS_WITH(file.write_bytes("ours"), Catch::Contains("appeared or was replaced"));
    CHECK(read_text(out) == "a new file by someone else");
    fs::remove(out + ".moved");
  }
  SECTION("a second writer of the same output stops at the lock") {
    const OutputFile first(out, {"output.file", "output 'out.h5'"});
    CHECK_THROWS_WITH(OutputFile(out, {"output.file", "output 'out.h5'"}), Catch::Contains("is in use by process"));
  }
}
