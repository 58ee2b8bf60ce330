// Write safety: exclusive temporaries, checked rename, what may be replaced, exclusive locks.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "kernel/support/errors.hpp"
#include "io/safe_file.hpp"
#include "io/hdf5_file.hpp"

#include "cli_support.hpp"

using namespace rcsim;
namespace fs = std::filesystem;

namespace {
using test::fresh_dir;
using test::write_text;
using test::read_text;
}  // namespace

TEST_CASE("temporaries are new, distinct, hidden files beside their target", "[io][safety]") {
  const fs::path d = fresh_dir("rcsim_safe_tmp");
  const std::string target = (d / "out.h5").string();
  std::set<std::string> names;
  for (int i = 0; i < 20; ++i) {
    const std::string t = create_temporary(target);
    CHECK(fs::path(t).parent_path() == d);
    CHECK(fs::path(t).filename().string().rfind(".out.h5.", 0) == 0);
    CHECK(fs::is_regular_file(fs::symlink_status(t)));
    CHECK(fs::file_size(t) == 0);
    names.insert(t);
  }
  CHECK(names.size() == 20);
  CHECK_FALSE(fs::exists(target));
  // A symlink planted at the old predictable name is left alone.
  write_text(d / "victim", "precious");
  fs::create_symlink(d / "victim", d / "out.h5.tmp");
  const std::string t = create_temporary(target);
  write_text(t, "new");
  replace_with(t, target);
  CHECK(read_text(d / "victim") == "precious");
  CHECK(read_text(target) == "new");
  CHECK_FALSE(fs::exists(t));
  CHECK_THROWS_WITH(create_temporary((d / "missing" / "x.h5").string()), Catch::Contains("No such file or directory"));
}

TEST_CASE("only regular files may be replaced", "[io][safety]") {
  const fs::path d = fresh_dir("rcsim_safe_kind");
  CHECK_NOTHROW(require_regular_or_absent((d / "absent").string(), "output.file"));
  write_text(d / "file", "x");
  CHECK_NOTHROW(require_regular_or_absent((d / "file").string(), "output.file"));
  fs::create_directory(d / "dir");
  CHECK_THROWS_WITH(require_regular_or_absent((d / "dir").string(), "output.file"),
                    Catch::Contains("key 'output.file'") && Catch::Contains("is a directory"));
  fs::create_symlink(d / "file", d / "link");
  CHECK_THROWS_AS(require_regular_or_absent((d / "link").string(), "output.file"), UsageError);
  fs::create_symlink(d / "nowhere", d / "dangling");
  CHECK(path_exists((d / "dangling").string()));
  CHECK_THROWS_WITH(require_regular_or_absent((d / "dangling").string(), ""), Catch::Contains("symbolic link"));
  CHECK_THROWS_WITH(require_regular_or_absent("/dev/null", ""), Catch::Contains("is a device"));
}

TEST_CASE("check_replaceable refuses foreign files unless forced", "[io][safety]") {
  const fs::path d = fresh_dir("rcsim_safe_foreign");
  const std::string text = (d / "text.h5").string(), mine = (d / "mine.h5").string();
  write_text(text, "hello");
  CHECK_THROWS_WITH(h5::check_replaceable(text, "output.file", "rcsim-run", false),
                    Catch::Contains("'" + text + "' exists and is not a complete rcsim-run file"));
  CHECK_NOTHROW(h5::check_replaceable(text, "output.file", "rcsim-run", true));
  {
    h5::File f = h5::File::create(mine);
    f.set_attr("filetype", "rcsim-run");
    f.close();
  }
  CHECK_FALSE(h5::is_complete(mine, "rcsim-run"));  // no complete = 1: not ours to overwrite silently
  CHECK_THROWS_AS(h5::check_replaceable(mine, "output.file", "rcsim-run", false), UsageError);
  {
    h5::File f = h5::File::open_readwrite(mine, mine);
    f.set_attr("complete", 1);
    f.close();
  }
  CHECK(h5::is_complete(mine, "rcsim-run"));
  CHECK_FALSE(h5::is_complete(mine, "rcsim-keys"));
  CHECK_NOTHROW(h5::check_replaceable(mine, "output.file", "rcsim-run", false));
  CHECK_THROWS_AS(h5::check_replaceable(mine, "output.file", "rcsim-keys", false), UsageError);
  CHECK_THROWS_AS(h5::check_replaceable(d.string(), "output.file", "rcsim-run", true), UsageError);
}

TEST_CASE("h5::File::close refuses while objects are open and reports write errors", "[io][safety]") {
  const fs::path d = fresh_dir("rcsim_safe_close");
  h5::File f = h5::File::create((d / "a.h5").string());
  {
    const h5::Group g = f.create_group("g");
    CHECK_THROWS_AS(f.close(), std::logic_error);
  }
  CHECK_NOTHROW(f.close());
  CHECK_NOTHROW(f.close());  // idempotent
  CHECK(h5::File::open_read((d / "a.h5").string()).exists("g"));
}

TEST_CASE("an exclusive lock admits one holder and names it", "[io][safety]") {
  const fs::path d = fresh_dir("rcsim_safe_lock");
  const std::string lock = lock_path_for((d / "out.h5").string());
  CHECK(lock == (d / "out.h5.lock").string());
  {
    const ExclusiveLock first(lock, "output 'out.h5'");
    CHECK(read_text(lock) == std::to_string(getpid()) + "\n");
    // flock locks belong to open files: a second open in this process conflicts like another process.
    CHECK_THROWS_WITH(ExclusiveLock(lock, "output 'out.h5'"),
                      Catch::Contains("output 'out.h5' is in use by process " + std::to_string(getpid())));
  }
  CHECK_FALSE(fs::exists(lock));  // removed on release
  const ExclusiveLock again(lock, "output 'out.h5'");
  CHECK(fs::exists(lock));
}

TEST_CASE("write_whole_file writes exactly and never through a symlink", "[io][safety]") {
  const fs::path d = fresh_dir("rcsim_safe_write");
  std::string big(3 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7919 % 251);
  write_text(d / "dst", "old content");
  write_whole_file((d / "dst").string(), big.data(), big.size());
  CHECK(read_text(d / "dst") == big);
  write_text(d / "victim", "precious");
  fs::create_symlink(d / "victim", d / "link");
  CHECK_THROWS_WITH(write_whole_file((d / "link").string(), "x", 1), Catch::Contains("cannot write"));
  CHECK(read_text(d / "victim") == "precious");
}

TEST_CASE("stale temporaries of a target are removed, nothing else", "[io][safety]") {
  const fs::path d = fresh_dir("rcsim_safe_stale");
  const std::string target = (d / "out.h5").string();
  const std::string a = create_temporary(target), b = create_temporary(target + ".partial");
  for (const char* keep : {"out.h5", ".out.h5.tmp", ".out.h5.ABCDEFG.tmp", ".other.h5.ABCDEF.tmp", "out.h5.ABCDEF.tmp"})
    write_text(d / keep, "keep");
  remove_stale_temporaries(target);
  CHECK_FALSE(fs::exists(a));
  CHECK(fs::exists(b));  // the checkpoint's temporaries are another target's
  for (const char* keep : {"out.h5", ".out.h5.tmp", ".out.h5.ABCDEFG.tmp", ".other.h5.ABCDEF.tmp", "out.h5.ABCDEF.tmp"})
    CHECK(read_text(d / keep) == "keep");
  remove_stale_temporaries(target + ".partial");
  CHECK_FALSE(fs::exists(b));
}
