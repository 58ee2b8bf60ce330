// A run's identity includes the content of every file it reads (issue 22): SHA-256 digests of
// init.file, weights.file and mask.file in the run file and in the checkpoint.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/run.hpp"
#include "config/config.hpp"
#include "io/checkpoint.hpp"
#include "io/hdf5_file.hpp"
#include "io/input_digest.hpp"
#include "io/inputs.hpp"
#include "io/run_file.hpp"
#include "cli_support.hpp"

using namespace rcsim;
namespace fs = std::filesystem;

namespace {

fs::path identity_dir(const std::string& name) { return rcsim::test::fresh_dir("rcsim_identity_" + name); }

// An init.file with /X0 [N, d] = scale * (1, 2, 3, ...).
void write_x0(const fs::path& path, int n, int d, double scale) {
  std::vector<double> x(static_cast<std::size_t>(n * d));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = scale * static_cast<double>(i + 1) / static_cast<double>(x.size());
  h5::File f = h5::File::create(path.string());
  f.write("X0", {static_cast<hsize_t>(n), static_cast<hsize_t>(d)}, x.data());
  f.close();
}

Config init_config(const fs::path& dir, int trials = 3) {
  return make_config({{"model.tokens", "4"}, {"model.dim", "3"}, {"model.layers", "3"},
                      {"run.trials", std::to_string(trials)}, {"run.threads", "1"}, {"init.type", "file"},
                      {"init.file", (dir / "x0.h5").string()}, {"output.file", (dir / "run.h5").string()}});
}

std::string file_sha256(const fs::path& p) { return sha256_of_file(p.string(), "test"); }

}  // namespace

TEST_CASE("sha256 of bytes and of files: the FIPS 180-2 test vectors", "[io][identity]") {
  CHECK(sha256_of_bytes("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_of_bytes("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const fs::path d = identity_dir("vectors");
  {
    std::ofstream f(d / "abc.txt", std::ios::binary);
    f << "abc";
    f.close();
    REQUIRE_FALSE(f.fail());
  }
  CHECK(file_sha256(d / "abc.txt") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("a run without input files has no digests, one with init.file has its file's", "[io][identity]") {
  const fs::path d = identity_dir("digests");
  CHECK(input_digests(make_config({})).empty());
  write_x0(d / "x0.h5", 4, 3, 1.0);
  const InputDigests in = input_digests(init_config(d));
  REQUIRE(in.size() == 1);
  CHECK(in[0].key == "init.file");
  CHECK(in[0].sha256 == file_sha256(d / "x0.h5"));
  CHECK(digests_text(in) == "init.file = " + file_sha256(d / "x0.h5") + "\n");
}

TEST_CASE("a complete run file whose init.file content changed is another configuration", "[io][identity]") {
  const fs::path d = identity_dir("rerun");
  write_x0(d / "x0.h5", 4, 3, 1.0);
  const Config c = init_config(d);
  run_to_file(c, {"test", 1}, nullptr, false);
  const std::string old_sha = file_sha256(d / "x0.h5");
  // The digest is stored on /config, and an unchanged input matches (the rerun is skipped).
  CHECK(h5::File::open_read(c.output.file).open_dataset("config").attr_string("input_sha256") ==
        "init.file = " + old_sha + "\n");
  CHECK(check_run_file(c.output.file, c.to_ini(), input_digests(c)).state == RunFileState::matches);

  write_x0(d / "x0.h5", 4, 3, 2.0);  // same path, same shape, other content
  const RunFileCheck ch = check_run_file(c.output.file, c.to_ini(), input_digests(c));
  CHECK(ch.state == RunFileState::differs);
  CHECK_THAT(ch.difference, Catch::Contains("the content of key 'init.file'") && Catch::Contains("x0.h5") &&
                                Catch::Contains(old_sha.substr(0, 16)));

  // Recomputed, the file records the new content.
  run_to_file(c, {"test", 1}, nullptr, false);
  CHECK(h5::File::open_read(c.output.file).open_dataset("config").attr_string("input_sha256") ==
        "init.file = " + file_sha256(d / "x0.h5") + "\n");
  CHECK(check_run_file(c.output.file, c.to_ini(), input_digests(c)).state == RunFileState::matches);
}

TEST_CASE("old run files without input_sha256: matched only by runs that read no file", "[io][identity]") {
  const fs::path d = identity_dir("old");
  write_x0(d / "x0.h5", 4, 3, 1.0);
  const Config c = init_config(d);
  run_to_file(c, {"test", 1}, nullptr, false);
  {  // as written before digests were recorded
    h5::File f = h5::File::open_readwrite(c.output.file, c.output.file);
    REQUIRE(H5Adelete(f.open_dataset("config").id(), "input_sha256") >= 0);
    f.close();
  }
  const RunFileCheck ch = check_run_file(c.output.file, c.to_ini(), input_digests(c));
  CHECK(ch.state == RunFileState::differs);
  CHECK_THAT(ch.difference, Catch::Contains("no SHA-256 of key 'init.file'"));

  Config plain = make_config({{"model.tokens", "4"}, {"model.dim", "3"}, {"model.layers", "2"}, {"run.trials", "2"},
                              {"output.file", (d / "plain.h5").string()}});
  run_to_file(plain, {"test", 1}, nullptr, false);
  CHECK_FALSE(h5::File::open_read(plain.output.file).open_dataset("config").has_attr("input_sha256"));
  CHECK(check_run_file(plain.output.file, plain.to_ini(), {}).state == RunFileState::matches);
}

TEST_CASE("a checkpoint of another init.file content is never resumed", "[io][identity][checkpoint]") {
  const fs::path d = identity_dir("checkpoint");
  write_x0(d / "x0.h5", 4, 3, 1.0);
  const Config c = init_config(d, 4);
  const std::string path = c.output.file + ".partial";
  RunResults full = run_simulation(prepare(c), 1);  // the flush frees its large data
  {
    Checkpoint cp(path, c.to_ini(), input_digests(c));
    cp.completed(full, 1);
    cp.completed(full, 2);
    cp.flush(full);
  }
  CHECK(h5::File::open_read(path).attr_string("input_sha256") == digests_text(input_digests(c)));
  SECTION("unchanged: resumed") {
    RunResults r = allocate_results(prepare(c));
    Checkpoint cp(path, c.to_ini(), input_digests(c));
    CHECK(cp.load(r) == std::vector<char>{0, 1, 1, 0});
  }
  SECTION("changed: discarded, and the run's trials are all of the new X(0)") {
    write_x0(d / "x0.h5", 4, 3, 2.0);
    RunResults r = allocate_results(prepare(c));
    Checkpoint cp(path, c.to_ini(), input_digests(c));
    CHECK(cp.load(r) == std::vector<char>{0, 0, 0, 0});
    CHECK_FALSE(fs::exists(path));
  }
  SECTION("a checkpoint without digests (older rcsim) is not resumed by a run that reads a file") {
    {
      h5::File f = h5::File::open_readwrite(path, path);
      REQUIRE(H5Adelete(f.id(), "input_sha256") >= 0);
      f.close();
    }
    RunResults r = allocate_results(prepare(c));
    Checkpoint cp(path, c.to_ini(), input_digests(c));
    CHECK(cp.load(r) == std::vector<char>{0, 0, 0, 0});
  }
}

TEST_CASE("an input file that changes after hashing is an error naming it", "[io][identity]") {
  const fs::path d = identity_dir("changed");
  write_x0(d / "x0.h5", 4, 3, 1.0);
  const InputDigests in = input_digests(init_config(d));
  CHECK_NOTHROW(check_inputs_unchanged(in));
  write_x0(d / "x0.h5", 4, 3, 2.0);
  CHECK_THROWS_WITH(check_inputs_unchanged(in), Catch::Contains("key 'init.file'") &&
                                                    Catch::Contains("changed while rcsim read it"));
}
