// Processes of an MPI job (optional at build time: -DRCSIM_MPI=ON defines RCSIM_WITH_MPI).
// Without MPI, or when the program was not started by mpirun, there is one process: rank 0
// of size 1, and every call below is a no-op. Only the main thread calls MPI.
#pragma once

#include <vector>

namespace rcsim::mpi {

// Initialises MPI for the lifetime of the object (in main); finalises it on destruction.
class Session {
 public:
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

bool enabled();  // built with MPI and MPI initialised
int rank();
int size();
// Element-wise maximum over all ranks, in place on every rank (collective).
void max_all(std::vector<int>& values);

// Static balanced assignment of `costs.size()` work items to `ranks` ranks: longest item first
// to the least-loaded rank (ties: the lowest rank). Returns the rank of each item; the same on
// every rank, so no communication is needed.
std::vector<int> assign_balanced(const std::vector<double>& costs, int ranks);

}  // namespace rcsim::mpi
