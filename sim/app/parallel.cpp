#include "app/parallel.hpp"

#include <algorithm>
#include <numeric>

#ifdef RCSIM_WITH_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: no C++ bindings to link
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace rcsim::mpi {

#ifdef RCSIM_WITH_MPI
namespace {
bool g_owner = false;  // this Session initialised MPI
}

Session::Session(int* argc, char*** argv) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    g_owner = true;
  }
}

Session::~Session() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (g_owner && !finalised) MPI_Finalize();
}

bool enabled() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

int rank() {
  if (!enabled()) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int size() {
  if (!enabled()) return 1;
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

void max_all(std::vector<int>& values) {
  if (!enabled() || values.empty()) return;
  MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_INT, MPI_MAX, MPI_COMM_WORLD);
}
#else
Session::Session(int*, char***) {}
Session::~Session() = default;
bool enabled() { return false; }
int rank() { return 0; }
int size() { return 1; }
void max_all(std::vector<int>&) {}
#endif

std::vector<int> assign_balanced(const std::vector<double>& costs, int ranks) {
  std::vector<std::size_t> order(costs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(static_cast<std::size_t>(std::max(ranks, 1)), 0.0);
  std::vector<int> owner(costs.size(), 0);
  for (const std::size_t i : order) {
    const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = static_cast<int>(r);
    load[r] += costs[i];
  }
  return owner;
}

}  // namespace rcsim::mpi
