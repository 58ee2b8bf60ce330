// rcsim: a simulator of rank collapse in deep self-attention. Everything lives in the library;
// this file only hands argv to the command-line layer.
#include "cli.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return rcsim::cli_main(args);
}
