// Work run off the Python thread without the GIL, stopped by Ctrl-C: the engine's bindings
// (engine_module.cpp) and the pretrained model's (llama_bindings.cpp) run every long computation
// through run_interruptible.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <thread>

namespace rcsim_python {

namespace py = pybind11;

inline bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// Waits up to `timeout` for the run without holding the GIL. Once the interpreter is finalizing
// (a daemon thread still running simulate() when the main thread ends), this thread must never
// take the GIL back: CPython would end it with pthread_exit inside pybind11's GIL guard, whose
// destructor then terminates the process ("terminate called without an active exception"). It
// stops the run, waits for its threads, and parks until the process exits.
template <class T>
std::future_status wait_without_gil(std::future<T>& result, std::atomic<bool>& cancel,
                                    std::chrono::milliseconds timeout) {
  PyThreadState* state = PyEval_SaveThread();
  const std::future_status st = result.wait_for(timeout);
  if (interpreter_finalizing()) {
    cancel.store(true);
    result.wait();
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  PyEval_RestoreThread(state);
  return st;
}

// work(&cancel) on a worker thread, without the GIL; this thread wakes every 0.1 s to let Python
// handle signals and to call between() (progress): Ctrl-C (or an exception of between) sets
// `cancel`, the work stops within one block (BlockParams::cancel), and the exception (the
// KeyboardInterrupt) is re-raised once the worker has finished. Returns work's result (or rethrows
// its exception).
template <class Work>
auto run_interruptible(Work work, const std::function<void()>& between = {}) {
  std::atomic<bool> cancel{false};
  auto result = std::async(std::launch::async, [&] { return work(&cancel); });
  for (;;) {
    if (wait_without_gil(result, cancel, std::chrono::milliseconds(100)) == std::future_status::ready) break;
    try {
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (between) between();  // may raise (a progress bar's error, KeyboardInterrupt inside it)
    } catch (...) {
      cancel.store(true);  // stop the work, wait for it, re-raise
      while (wait_without_gil(result, cancel, std::chrono::milliseconds(100)) != std::future_status::ready) {
      }
      try {
        result.get();
      } catch (...) {
      }
      throw;
    }
  }
  return result.get();  // rethrows the work's exception
}

}  // namespace rcsim_python
