// rcsim: a simulator of rank collapse in deep self-attention. Everything lives in the library;
// this file only starts MPI (when built with it) and hands argv to the command-line layer.
#include "cli/cli.hpp"
#include "run/parallel.hpp"

int main(int argc, char** argv) {
  const rcsim::mpi::Session mpi(&argc, &argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  return rcsim::cli_main(args);
}
