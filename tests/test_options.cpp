// One command-options mechanism (issue 20): every command declares its options as KeyDecls,
// read by the same parser from an INI file (--config) and from the command line. An INI file
// gives the same result as the same keys on the command line; an unknown key is exit 2 naming it.
#include <catch2/catch.hpp>

#include "cli_support.hpp"

#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli/cli.hpp"
#include "io/hdf5_file.hpp"

using namespace rcsim;
namespace fs = std::filesystem;
using test::Outcome;
using test::run_cli;
using test::temp_path;

namespace {

std::vector<double> dataset(const std::string& file, const std::string& name) {
  return h5::File::open_read(file).read(name).data;
}

}  // namespace

TEST_CASE("ln-geometry: an INI file gives the same result as the same keys on the command line", "[options]") {
  const fs::path dir = test::fresh_dir("rcsim_options_ln");
  const std::string from_cli = (dir / "cli.h5").string(), from_ini = (dir / "ini.h5").string();
  const std::string ini = (dir / "ln.ini").string();
  test::write_text(ini, "[ln]\ndim = 4\neps = 1e-3, 1e-5\nsamples = 200\nseed = 7\nstore = 5\n[norm]\ngain = 2\n"
                        "[output]\nfile = " + from_ini + "\n");
  const Outcome a = run_cli({"ln-geometry", "--ln.dim=4", "--ln.eps=1e-3, 1e-5", "--ln.samples", "200", "--ln.seed=7",
                             "--ln.store=5", "--norm.gain=2", "--output.file=" + from_cli, "--quiet"});
  const Outcome b = run_cli({"ln-geometry", "--config", ini, "--quiet"});
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  CHECK(a.out == b.out);
  CHECK(a.out.find("d = 4") != std::string::npos);
  for (const char* name : {"gain", "axes", "semi_axes", "eps", "radius_quantiles", "points"}) {
    INFO(name);
    CHECK(dataset(from_cli, name) == dataset(from_ini, name));
  }
  // The command line wins over the file.
  const Outcome c = run_cli({"ln-geometry", "--config", ini, "--ln.dim=3", "--output.file=", "--quiet"});
  CHECK(c.status == 0);
  CHECK(c.out.find("d = 3") != std::string::npos);
}

TEST_CASE("analyze: an INI file gives the same result as the same options on the command line", "[options]") {
  const fs::path dir = test::fresh_dir("rcsim_options_analyze");
  const std::string run = (dir / "run.h5").string(), ini = (dir / "analyze.ini").string();
  REQUIRE(cli_main({"run", "--model.tokens=2", "--model.dim=2", "--model.layers=40", "--mask.type=causal",
                    "--weights.q=zero", "--weights.k=zero", "--weights.v=identity", "--run.trials=2",
                    "--output.file=" + run, "--quiet"}) == 0);
  test::write_text(ini, "threshold = 0.25\nwindow = 2:20\nno-write = true\n");
  const Outcome a = run_cli({"analyze", run, "--threshold", "0.25", "--window=2:20", "--no-write", "--quiet"});
  const Outcome b = run_cli({"analyze", "--config", ini, run, "--quiet"});
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  CHECK(a.out == b.out);
  CHECK_FALSE(h5::File::open_read(run).exists("analysis"));  // no-write, from either source
  const Outcome c = run_cli({"analyze", run, "--quiet"});  // the defaults: a different table
  CHECK(c.status == 0);
  CHECK(c.out != a.out);
  CHECK(h5::File::open_read(run).exists("analysis"));
}

TEST_CASE("every command: an unknown key is a usage error naming the key", "[options]") {
  const std::string out = temp_path("rcsim_options_unknown.h5");
  fs::remove(out);
  for (const char* command : {"run", "sweep", "mask-info", "equilibria", "analyze", "keys", "brody-map",
                              "brody-example", "ln-geometry"}) {
    INFO(command);
    const Outcome o = run_cli({command, "--frobnicate.level=3", "--output.file=" + out, "--quiet"});
    CHECK(o.status == 2);
    CHECK(o.err.find("unknown key 'frobnicate.level'") != std::string::npos);
    CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
    CHECK_FALSE(fs::exists(out));
  }
  // In an INI file as well, for a geometry command and for analyze.
  const std::string ini = temp_path("rcsim_options_unknown.ini");
  test::write_text(ini, "[frobnicate]\nlevel = 3\n");
  for (const char* command : {"keys", "analyze"}) {
    INFO(command);
    const Outcome o = run_cli({command, "--config", ini, "--quiet"});
    CHECK(o.status == 2);
    CHECK(o.err.find("unknown key 'frobnicate.level' in configuration file") != std::string::npos);
  }
  // A key given twice and a bad value are usage errors too, through the same parser.
  CHECK(run_cli({"brody-example", "--example.angles=3", "--example.angles", "4"}).status == 2);
  CHECK(run_cli({"analyze", "--threshold=2", out}).status == 2);
}
