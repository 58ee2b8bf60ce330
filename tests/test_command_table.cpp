// The table of commands (sim/cli/command_table.hpp, issue 34): `rcsim --help`, the list of an
// unknown command and the dispatch come from it, and a key that a command does not use is refused
// naming the key, the command and the commands that use it, never silently ignored.
#include <catch2/catch.hpp>

#include "cli_support.hpp"

#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli/command_table.hpp"

using namespace rcsim;
namespace fs = std::filesystem;
using test::Outcome;
using test::run_cli;

// One case per command. Each failed before the table: mask-info ran on (exit 0, the key silently
// unused), the others answered "unknown key" or named no command that uses the key.
TEST_CASE("every command refuses a key it does not use, naming the commands that use it", "[cli]") {
  const fs::path dir = test::fresh_dir("rcsim_command_table_unused");
  const std::string out = (dir / "out.h5").string();
  struct Case {
    std::vector<std::string> args;
    std::string key, users;
  };
  const std::vector<Case> cases = {
      {{"run", "--tol=1e-6"}, "tol", "equilibria"},
      {{"sweep", "--threshold=0.1"}, "threshold", "analyze"},
      {{"mask-info", "--model.dim=4"}, "model.dim", "run, sweep, equilibria"},
      {{"equilibria", "--dropout.attention=0.1"}, "dropout.attention", "run, sweep"},
      {{"analyze", "--model.dim=4", out}, "model.dim", "run, sweep, equilibria"},
      {{"generate", "--model.dim=4", "model.bin"}, "model.dim", "run, sweep, equilibria"},
      {{"keys", "--model.tokens=4"}, "model.tokens", "run, sweep, mask-info, equilibria"},
      {{"brody-map", "--keys.count=4"}, "keys.count", "keys"},
      {{"brody-example", "--ln.dim=3"}, "ln.dim", "ln-geometry"},
      {{"ln-geometry", "--example.angles=3"}, "example.angles", "brody-example"},
  };
  for (Case c : cases) {
    const std::string command = c.args.front();
    INFO(command);
    c.args.push_back("--output.file=" + out);
    if (command == "analyze") c.args.pop_back();
    const Outcome o = run_cli(c.args);
    CHECK(o.status == 2);
    CHECK(o.err.find(command + ": key '" + c.key + "' is not used by rcsim " + command + " (it is used by: " +
                     c.users + ")") != std::string::npos);
    CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
    CHECK(o.out.empty());
    CHECK_FALSE(fs::exists(out));
  }
  // A swept key of the run vocabulary (sweep.KEY) is used by run and sweep alone.
  const Outcome axis = run_cli({"mask-info", "--sweep.model.tokens=3, 4"});
  CHECK(axis.status == 2);
  CHECK(axis.err.find("key 'sweep.model.tokens' is not used by rcsim mask-info (it is used by: run, sweep)") !=
        std::string::npos);
  // A misspelt key is named as unknown, with the nearest known key, before an unused one.
  const Outcome unknown = run_cli({"mask-info", "--model.dim=4", "--mask.typ=causal"});
  CHECK(unknown.status == 2);
  CHECK(unknown.err.find("unknown key 'mask.typ' on the command line (did you mean 'mask.type'?)") !=
        std::string::npos);
}

TEST_CASE("a configuration file: refused by a geometry command, dropped by mask-info (shared with run)", "[cli]") {
  const fs::path dir = test::fresh_dir("rcsim_command_table_file");
  const std::string ini = (dir / "run.ini").string(), out = (dir / "keys.h5").string();
  test::write_text(ini, "[model]\ntokens = 5\ndim = 3\n[mask]\ntype = causal\n");
  const Outcome keys = run_cli({"keys", "--config", ini, "--output.file=" + out});
  CHECK(keys.status == 2);
  CHECK(keys.err.find("keys: key 'model.tokens' in configuration file '" + ini + "' is not used by rcsim keys") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(out));
  // mask-info reads the file written for rcsim run: model.dim is dropped (with a warning on the
  // log), the mask is the one of the keys it uses.
  const Outcome from_file = run_cli({"mask-info", "--config", ini, "--quiet"});
  const Outcome given = run_cli({"mask-info", "--model.tokens=5", "--mask.type=causal"});
  CHECK(from_file.status == 0);
  CHECK(from_file.out == given.out);
  CHECK(given.out.find("N = 5") != std::string::npos);
}

TEST_CASE("the table of commands gives the help, the list of commands and the dispatch", "[cli]") {
  const std::string names =
      "run, sweep, mask-info, equilibria, analyze, generate, keys, brody-map, brody-example, ln-geometry";
  CHECK(command_names() == names);
  const Outcome unknown = run_cli({"frobnicate"});
  CHECK(unknown.status == 2);
  CHECK(unknown.err.find("unknown command 'frobnicate' (allowed: " + names + "; see rcsim --help)") !=
        std::string::npos);
  const Outcome none = run_cli({});
  CHECK(none.status == 2);
  CHECK(none.err.find("no command given (" + names + ")") != std::string::npos);
  const std::string overview = run_cli({"--help"}).out;
  std::size_t at = 0;
  for (const Command& c : commands()) {
    INFO(c.name);
    const std::size_t here = overview.find("\n  " + c.name + " ", at);
    CHECK(here != std::string::npos);  // in the table's order
    at = here == std::string::npos ? at : here;
    CHECK(run_cli({c.name, "--help"}).out == c.help());
    // Every key a command declares is one it is counted among the users of.
    for (const KeyDecl& k : c.keys()) {
      const std::vector<std::string> users = commands_using(k.key);
      CHECK(std::find(users.begin(), users.end(), c.name) != users.end());
    }
  }
  // run and sweep read every key; mask-info the mask's keys and the number of tokens.
  for (const KeyDecl& k : config_keys()) CHECK((k.used_by("run") && k.used_by("sweep")));
  std::vector<std::string> mask_keys;
  for (const KeyDecl& k : find_command("mask-info").keys()) mask_keys.push_back(k.key);
  CHECK(mask_keys == std::vector<std::string>{"model.tokens", "mask.type", "mask.window", "mask.file"});
  // The dispatch: a command runs its own function (mask-info prints the mask).
  const Outcome mask = run_cli({"mask-info", "--mask.type=causal", "--model.tokens=3"});
  CHECK(mask.status == 0);
  CHECK(mask.out.find("mask: causal, N = 3\n  1..\n  11.\n  111\n") == 0);
}
