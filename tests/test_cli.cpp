// The command line in-process: exit codes, messages, and no output on failure.
#include <catch2/catch.hpp>

#include "cli_support.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <fstream>

#include "cli/cli.hpp"
#include "io/hdf5_file.hpp"

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

TEST_CASE("dry run writes nothing, run writes a complete file, rerun skips it", "[cli]") {
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
  CHECK(cli_main({"-V"}) == 0);  // the short spelling (issue 39)
  CHECK(cli_main({"mask-info", "--mask.type=causal", "--model.tokens=4"}) == 0);
}

TEST_CASE("per-command help: short and specific, rcsim --help lists the commands", "[cli]") {
  auto output_of = [](const std::vector<std::string>& args, int& status) {
    std::ostringstream out;
    std::streambuf* old = std::cout.rdbuf(out.rdbuf());
    status = cli_main(args);
    std::cout.rdbuf(old);
    return out.str();
  };
  auto lines = [](const std::string& s) { return std::count(s.begin(), s.end(), '\n'); };
  int status = -1;
  const std::string overview = output_of({"--help"}, status);
  CHECK(status == 0);
  CHECK(lines(overview) < 40);
  for (const char* command : {"run", "sweep", "mask-info", "equilibria", "analyze", "keys", "brody-map",
                              "brody-example", "ln-geometry"}) {
    INFO(command);
    CHECK(overview.find(std::string("\n  ") + command + " ") != std::string::npos);
    const std::string help = output_of({command, "--help"}, status);
    CHECK(status == 0);
    CHECK(help.find(std::string("usage: rcsim ") + (std::string(command) == "sweep" ? "run" : command)) == 0);
    CHECK(lines(help) < 60);
  }
  CHECK(output_of({"analyze", "--help"}, status).find("--window=auto") != std::string::npos);
  CHECK(output_of({"equilibria", "--help"}, status).find("--verbose") != std::string::npos);
  const std::string keys = output_of({"--help-keys"}, status);
  CHECK(status == 0);
  CHECK(keys.find("--model.tokens  (default: 8)") != std::string::npos);
  CHECK(keys.find("--keys.count") != std::string::npos);  // the geometry commands' keys too
  CHECK(cli_main({"frobnicate", "--help"}) == 2);
}
