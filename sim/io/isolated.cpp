#include "io/isolated.hpp"

#include <poll.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "kernel/support/errors.hpp"

namespace rcsim {

namespace {

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t w = ::write(fd, s.data() + done, s.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    done += static_cast<std::size_t>(w);
  }
}

// The child's side of run_isolated: run `work`, report "U" (usage error) or "R" (runtime error)
// and the message on the pipe, and exit with 2, 1 or 0.
[[noreturn]] void run_child(const std::function<void()>& work, const int fds[2]) {
  ::close(fds[0]);
  // A crash ends the child with its signal, for the parent to report (not a handler's report:
  // a test framework's or a sanitizer's handler would print its own and exit with a status).
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, SIG_DFL);
  int code = 0;
  try {
    work();
  } catch (const UsageError& e) {
    write_all(fds[1], std::string("U") + e.what());
    code = 2;
  } catch (const std::exception& e) {
    write_all(fds[1], std::string("R") + e.what());
    code = 1;
  } catch (...) {
    write_all(fds[1], "Runknown error");
    code = 1;
  }
  std::cout.flush();
  ::close(fds[1]);
  ::_exit(code);
}

}  // namespace

double isolated_time_limit(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return 30.0 + (ec ? 0.0 : static_cast<double>(size) / 5e6);
}

void run_isolated(const std::function<void()>& work, const std::string& what, double seconds) {
  int fds[2];
  if (::pipe(fds) != 0) throw RuntimeError(what + ": cannot create a pipe (" + std::strerror(errno) + ")");
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw RuntimeError(what + ": cannot start a child process (" + std::strerror(err) + ")");
  }
  if (pid == 0) run_child(work, fds);
  ::close(fds[1]);
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds > 0 ? seconds : 0));
  // Milliseconds left before the deadline (-1: no limit), for poll.
  const auto left_ms = [&]() -> int {
    if (seconds <= 0) return -1;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(std::max<long long>(0, std::min<long long>(ms, 1000000)));
  };
  const auto too_slow = [&] {
    ::kill(pid, SIGKILL);
    int ignored = 0;
    while (::waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
    }
    throw RuntimeError(what + " failed: the HDF5 library did not finish within " +
                       std::to_string(static_cast<long long>(std::ceil(seconds))) +
                       " s (it can loop forever on a corrupted file); stopped it, nothing was changed");
  };
  std::string message;
  char buf[4096];
  for (;;) {
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = ::poll(&pfd, 1, left_ms());
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      ::close(fds[0]);
      too_slow();
    }
    const ssize_t r = ::read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    message.append(buf, static_cast<std::size_t>(r));
  }
  ::close(fds[0]);
  int status = 0;
  for (;;) {  // the child closed its end: it is exiting (or closed it and went on: the deadline holds)
    const pid_t w = ::waitpid(pid, &status, seconds > 0 ? WNOHANG : 0);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) throw RuntimeError(what + ": lost the child process (" + std::strerror(errno) + ")");
    if (w == 0) {
      if (left_ms() == 0) too_slow();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    throw RuntimeError(what + " failed: the HDF5 library crashed on it (signal " + std::to_string(sig) + ", " +
                       strsignal(sig) + "); the file is probably corrupted (nothing was changed)");
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (code == 0) return;
  const std::string text = message.empty() ? std::string(" ") : message;
  if (text[0] == 'U') throw UsageError(text.substr(1));
  throw RuntimeError(what + ": " + (text.size() > 1 ? text.substr(1) : "failed (exit status " + std::to_string(code) + ")"));
}

}  // namespace rcsim
