// Worker threads that the system may refuse (issue 22): creating a thread beyond what the system
// allows (RLIMIT_NPROC, threads-max, memory for the stacks) throws std::system_error from
// std::thread's constructor; with other threads already running, that used to end the process
// in std::terminate ("terminate called without an active exception"). Here it is one clear
// RuntimeError naming the configuration key that asked for the threads.
#pragma once

#include <functional>
#include <string>

namespace rcsim {

// Run `worker` on `extra` new threads and then on the calling thread (when `also_here`), and
// join them all. If a thread cannot be created, `stop()` is called (it must make the running
// workers return soon), the threads already started are joined, and RuntimeError says
// "key 'KEY' = N: ..." with the OS error and what to do.
void run_workers(int extra, bool also_here, const std::function<void()>& worker, const std::function<void()>& stop,
                 const std::string& key, int requested);

}  // namespace rcsim
