// rcsim._engine: the Python bindings (pybind11). One function, run_image: a run of one
// configuration, parsed and validated by the same code as `rcsim run` (parse_config_sources,
// make_config), computed in this process with the GIL released, and returned as the bytes of the
// run file the CLI would write (run_to_image: the same writer into an HDF5 file image).
// analysis/rcsim/simulate.py opens those bytes with the package's reader (open_run), so the
// Dataset of rcsim.simulate(...) is the Dataset of the CLI's file, value for value.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "app/run.hpp"
#include "app/logger.hpp"
#include "config/config.hpp"
#include "kernel/errors.hpp"
#include "kernel/layer.hpp"
#include "kernel/version.hpp"
#include "io/run_file.hpp"
#include "kernel/simulation.hpp"

namespace py = pybind11;

namespace {

// The configuration of one run from `keys` ("--model.dim=16", ...) over `config_file` over the
// key defaults, exactly as `rcsim run` resolves it. A key given here replaces a sweep axis of the
// file; a sweep that remains is refused (simulate runs one configuration).
rcsim::Config resolve(const std::vector<std::string>& keys, const std::optional<std::string>& config_file) {
  rcsim::ParsedArgs p = rcsim::parse_config_sources(keys, config_file);
  const rcsim::ParsedArgs given = rcsim::parse_config_sources(keys, std::nullopt);
  auto& axes = p.sweep;
  axes.erase(std::remove_if(axes.begin(), axes.end(), [&](const auto& a) { return given.values.count(a.first) > 0; }),
             axes.end());
  if (!axes.empty())
    throw rcsim::UsageError("the configuration has a [sweep] section (sweep." + axes.front().first +
                            "): rcsim.simulate runs one configuration; give that key a single value, or run the "
                            "sweep with `rcsim run` and read it with rcsim.open_sweep");
  return rcsim::make_config(p.values);
}

py::bytes run_image(const std::vector<std::string>& keys, const std::optional<std::string>& config_file,
                    const std::string& call, bool quiet) {
  spdlog::set_level(quiet ? spdlog::level::warn : spdlog::level::info);
  const rcsim::Config c = resolve(keys, config_file);
  rcsim::Provenance prov;
  prov.command_line = call;
  std::atomic<bool> cancel{false};
  // The run on a worker thread, without the GIL; this thread wakes every 0.1 s to let Python
  // handle signals (Ctrl-C sets `cancel`, the run stops between layers, KeyboardInterrupt).
  std::future<std::vector<char>> result =
      std::async(std::launch::async, [&] { return rcsim::run_to_image(c, prov, &cancel); });
  for (;;) {
    std::future_status st;
    {
      py::gil_scoped_release no_gil;
      st = result.wait_for(std::chrono::milliseconds(100));
    }
    if (st == std::future_status::ready) break;
    if (PyErr_CheckSignals() != 0) {
      cancel.store(true);
      {
        py::gil_scoped_release no_gil;
        result.wait();
      }
      try {
        result.get();
      } catch (...) {
      }
      throw py::error_already_set();
    }
  }
  std::vector<char> image = result.get();  // rethrows the run's exception
  return py::bytes(image.data(), image.size());
}

}  // namespace

PYBIND11_MODULE(_engine, m) {
  m.doc() = "rcsim's engine in this process (use rcsim.simulate; docs/python.md)";
  // A -march=native engine imported on a CPU without its instruction sets: one clear ImportError.
  if (const std::string missing = rcsim::missing_instruction_sets(); !missing.empty())
    throw py::import_error("rcsim's engine was built for " + rcsim::instruction_set() + " but this CPU lacks " +
                           missing + "; rebuild it on this machine (or with -DRCSIM_NATIVE=OFF)");
  rcsim::install_logger();
  // A configuration error names the key and what is allowed, as on the command line (exit 2).
  static py::exception<rcsim::UsageError> config_error(m, "ConfigError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const rcsim::UsageError& e) {
      config_error(e.what());
    } catch (const rcsim::Interrupted&) {
      PyErr_SetString(PyExc_KeyboardInterrupt, "rcsim.simulate interrupted");
    }
  });
  m.def("run_image", &run_image, py::arg("keys"), py::arg("config_file") = std::nullopt,
        py::arg("call") = "rcsim.simulate()", py::arg("quiet") = true,
        "Run one configuration (keys as '--section.key=value', over config_file, over the key "
        "defaults) and return the bytes of its HDF5 run file.");
  m.def("resolved_config", [](const std::vector<std::string>& keys, const std::optional<std::string>& config_file) {
    return resolve(keys, config_file).to_ini();
  }, py::arg("keys"), py::arg("config_file") = std::nullopt,
        "The fully resolved configuration (INI text) that run_image would run.");
  m.def("keep_freed_memory", &rcsim::keep_freed_memory,
        "Tune glibc's allocator for repeated trials (process-wide; what rcsim's main() does).");
  m.attr("version") = rcsim::version();
  m.attr("instruction_set") = rcsim::instruction_set();
  m.attr("git_sha") = rcsim::git_sha();
}
