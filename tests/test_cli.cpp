// The command line in-process: exit codes, messages, and no output on failure.
#include <catch2/catch.hpp>

#include "cli_support.hpp"

#include <filesystem>
#include <fstream>

#include "cli/cli.hpp"
#include "hdf5/hdf5_file.hpp"

using namespace rcsim;
namespace fs = std::filesystem;
using test::temp_path;

TEST_CASE("usage errors exit 2 and write nothing", "[cli]") {
  const std::string out = temp_path("rcsim_cli_bad.h5");
  fs::remove(out);
  const std::vector<std::vector<std::string>> bad = {
      {"run", "--config", temp_path("no_such_config.ini")},
      {"run", "--model.tokenz=3", "--output.file=" + out},
      {"run", "--model.tokens=abc", "--output.file=" + out},
      {"run", "--model.layers=0", "--output.file=" + out},
      {"run", "--mask.type=random", "--output.file=" + out},
      {"run", "--model.d_qk=0", "--output.file=" + out},
      {"run", "--mask.type=custom", "--mask.file=/nonexistent.h5", "--output.file=" + out},
      {"run", "--sweep.mode=zip", "--sweep.model.dim=2,3", "--sweep.model.tokens=4", "--output.file=" + out},
      {"frobnicate"},
      {},
  };
  test::check_usage_errors(bad, {out, out + ".tmp"});
}

TEST_CASE("dry run writes nothing; run writes a complete file; rerun skips it", "[cli]") {
  const std::string out = temp_path("rcsim_cli_ok.h5");
  fs::remove(out);
  const std::vector<std::string> args = {"run", "--config", temp_path("rcsim_cli.ini"), "--output.file=" + out, "--quiet"};
  std::ofstream(args[2]) << "[model]\ntokens = 4\ndim = 3\nlayers = 3\n[run]\ntrials = 2\n";
  auto dry = args;
  dry.push_back("--dry-run");
  CHECK(cli_main(dry) == 0);
  CHECK_FALSE(fs::exists(out));
  CHECK(cli_main(args) == 0);
  REQUIRE(fs::exists(out));
  const auto written = fs::last_write_time(out);
  CHECK(cli_main(args) == 0);  // complete with the same configuration: skipped
  CHECK(fs::last_write_time(out) == written);
  CHECK(h5::File::open_read(out).attr_int("complete") == 1);
}

TEST_CASE("a sweep writes one file per point", "[cli][sweep]") {
  const std::string out = temp_path("rcsim_cli_sweep.h5");
  const std::string dir = temp_path("rcsim_cli_sweep");
  fs::remove_all(dir);
  fs::remove(temp_path("rcsim_cli_sweep.ini"));
  CHECK(cli_main({"run", "--config", temp_path("rcsim_cli_sweep.ini"), "--quiet"}) == 2);  // missing file
  std::ofstream(temp_path("rcsim_cli_sweep.ini"))
      << "[model]\ntokens = 4\ndim = 2\nlayers = 2\n[run]\ntrials = 1\n[output]\nfile = " << out
      << "\n[sweep]\nmask.type = complete, causal\nnorm.type = none, sphere, layernorm\n";
  CHECK(cli_main({"run", "--config", temp_path("rcsim_cli_sweep.ini"), "--quiet"}) == 0);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.path().extension() == ".h5" && e.path().filename() != "index.h5";
  CHECK(files == 6);
  CHECK(fs::exists(dir + "/mask.type=causal__norm.type=layernorm.h5"));
}

TEST_CASE("help and version exit 0", "[cli]") {
  CHECK(cli_main({"--help"}) == 0);
  CHECK(cli_main({"--version"}) == 0);
  CHECK(cli_main({"mask-info", "--mask.type=causal", "--model.tokens=4"}) == 0);
}
