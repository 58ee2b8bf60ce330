// rcsim: a simulator of rank collapse in deep self-attention. Everything lives in the library;
// this file only starts MPI (when built with it) and hands argv to the command-line layer.
#include <csignal>

#include "cli/cli.hpp"
#include "app/parallel.hpp"
#include "kernel/block/layer.hpp"

int main(int argc, char** argv) {
  // A closed pipe (`rcsim equilibria ... | head`) must not kill the run before its file is
  // written: printing then fails quietly, the computation and the output file go on.
  std::signal(SIGPIPE, SIG_IGN);
  rcsim::keep_freed_memory();  // process-wide allocator tuning belongs to main (kernel/block/layer.hpp)
  rcsim::fix_product_blocking();  // the same bits on any CPU of this instruction set (kernel/block/layer.hpp)
  const rcsim::mpi::Session mpi(&argc, &argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  return rcsim::cli_main(args);
}
