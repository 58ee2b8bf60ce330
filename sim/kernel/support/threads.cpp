#include "kernel/support/threads.hpp"

#include <system_error>
#include <thread>
#include <vector>

#include "kernel/support/errors.hpp"

namespace rcsim {

void run_workers(int extra, bool also_here, const std::function<void()>& worker, const std::function<void()>& stop,
                 const std::string& key, int requested) {
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(extra > 0 ? extra : 0));
  std::string failure;
  for (int i = 0; i < extra; ++i) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error& e) {
      failure = "key '" + key + "' = " + std::to_string(requested) + ": the system refused to start worker thread " +
                std::to_string(i + 1 + (also_here ? 1 : 0)) + " (" + e.code().message() +
                "); choose a smaller " + key + " (0 = one per core) or raise the limit on threads (ulimit -u)";
      stop();
      break;
    }
  }
  if (failure.empty() && also_here) worker();
  for (auto& th : pool) th.join();
  if (!failure.empty()) throw RuntimeError(failure);
}

}  // namespace rcsim
