// Helpers shared by the tests: temporary paths and directories, and driving the command line
// in-process (cli_main).
#pragma once

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <iterator>
#include <string>
#include <vector>

#include "cli/cli.hpp"

namespace rcsim::test {

// A path in the temporary directory.
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

// An empty directory `name` in the temporary directory (removed first if it exists).
inline std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path d = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// The whole content of a file ("" if it cannot be read), and a file with `text` as content.
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// The message of the exception `f` throws ("" if it throws none).
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Every argument list in `bad` is a usage error: cli_main returns 2, and none of the paths in
// `must_not_exist` (the output and its temporary name) is left behind.
inline void check_usage_errors(const std::vector<std::vector<std::string>>& bad,
                               const std::vector<std::string>& must_not_exist) {
  for (const auto& args : bad) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    INFO("args: " << joined);
    CHECK(cli_main(args) == 2);
    for (const auto& path : must_not_exist) CHECK_FALSE(std::filesystem::exists(path));
  }
}

// What cli_main returned and printed for `args` (stdout and stderr captured).
struct Outcome {
  int status = -1;
  std::string out, err;
};

inline Outcome run_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  std::streambuf* old_out = std::cout.rdbuf(out.rdbuf());
  std::streambuf* old_err = std::cerr.rdbuf(err.rdbuf());
  Outcome o;
  o.status = cli_main(args);
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  o.out = out.str();
  o.err = err.str();
  return o;
}

}  // namespace rcsim::test
