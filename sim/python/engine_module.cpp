// rcsim._engine: the Python bindings (pybind11). The main function, run_image: a run of one
// configuration, parsed and validated by the same code as `rcsim run` (parse_config_sources,
// make_config), computed in this process with the GIL released, and returned as the bytes of the
// run file the CLI would write (run_to_image: the same writer into an HDF5 file image).
// python/rcsim/simulate.py opens those bytes with the package's reader (open_run), so the
// Dataset of rcsim.simulate(...) is the Dataset of the CLI's file, value for value. `sweep` runs
// the command line's sweep runner (app/sweep_runner.hpp) for rcsim.sweep.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "python/interruptible.hpp"
#include "app/run.hpp"
#include "app/sweep_runner.hpp"
#include "app/logger.hpp"
#include "config/config.hpp"
#include "kernel/measures/clusters.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/model/host_arrays.hpp"
#include "kernel/model/parameters.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/measures/metrics.hpp"
#include "kernel/support/version.hpp"
#include "io/run_file.hpp"
#include "kernel/trial/simulation.hpp"

namespace py = pybind11;

void register_llama(py::module_& m);  // llama_bindings.cpp

namespace {

using rcsim_python::run_interruptible;
using rcsim_python::wait_without_gil;

// The configuration of one run from `keys` ("--model.dim=16", ...) over `config_file` over the
// key defaults, exactly as `rcsim run` resolves it. A key given here replaces a sweep axis of the
// file; a sweep that remains is refused (simulate runs one configuration). Messages name the
// Python function `who` the keys were given to (rcsim.simulate, ...), not a command line.
rcsim::Config resolve(const std::vector<std::string>& keys, const std::optional<std::string>& config_file,
                      const std::string& who) {
  const std::string where = "given to " + who;
  rcsim::ParsedArgs p = rcsim::parse_config_sources(keys, config_file, {}, where);
  const rcsim::ParsedArgs given = rcsim::parse_config_sources(keys, std::nullopt, {}, where);
  auto& axes = p.sweep;
  axes.erase(std::remove_if(axes.begin(), axes.end(), [&](const auto& a) { return given.values.count(a.first) > 0; }),
             axes.end());
  if (!axes.empty())
    throw rcsim::UsageError("the configuration has a [sweep] section (sweep." + axes.front().first +
                            "): " + who + " runs one configuration; give that key a single value, or run the "
                            "sweep with `rcsim run` and read it with rcsim.open_sweep");
  return rcsim::make_config(p.values);
}

using DoubleArray = py::array_t<double, py::array::c_style | py::array::forcecast>;

rcsim::NdArray to_nd(const DoubleArray& a) {
  rcsim::NdArray out;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) out.shape.push_back(static_cast<rcsim::Extent>(a.shape(i)));
  out.data.assign(a.data(), a.data() + a.size());
  return out;
}

// The host inputs of a run: arrays by dataset name (X0, W_Q, ...) and a 0/1 mask, as
// python/rcsim/engine.py hands them over (already NumPy, float64 and uint8).
rcsim::HostInputs host_inputs(const rcsim::Config& c, const std::map<std::string, DoubleArray>& arrays,
                              const std::optional<py::array_t<std::uint8_t, py::array::c_style>>& mask,
                              const std::string& who) {
  rcsim::HostInputs host;
  if (!arrays.empty()) {
    std::map<std::string, rcsim::NdArray> given;
    for (const auto& [name, a] : arrays) given[name] = to_nd(a);
    host.arrays = rcsim::input_arrays_from(c, std::move(given), who + " arrays");
  }
  if (mask) {
    if (mask->ndim() != 2)
      throw rcsim::UsageError(who + " mask: a 2-d array [N, N] is needed, got " + std::to_string(mask->ndim()) +
                              " dimensions");
    rcsim::MaskMatrix m(mask->shape(0), mask->shape(1));
    for (py::ssize_t i = 0; i < mask->shape(0); ++i)
      for (py::ssize_t j = 0; j < mask->shape(1); ++j) m(i, j) = *mask->data(i, j) != 0;
    host.mask = std::move(m);
  }
  return host;
}

py::bytes run_image(const std::vector<std::string>& keys, const std::optional<std::string>& config_file,
                    const std::string& call, bool quiet, const std::map<std::string, DoubleArray>& arrays,
                    const std::optional<py::array_t<std::uint8_t, py::array::c_style>>& mask,
                    const std::optional<std::function<void(int, int)>>& progress, const std::string& who,
                    const std::optional<std::function<void(long long, long long)>>& layer_progress) {
  spdlog::set_level(quiet ? spdlog::level::warn : spdlog::level::info);
  const rcsim::Config c = resolve(keys, config_file, who);
  rcsim::HostInputs host = host_inputs(c, arrays, mask, who);
  rcsim::Provenance prov;
  prov.command_line = call;
  // Progress: the workers store (done, total); this thread reports it to Python between waits.
  std::atomic<int> done{0}, total{c.run.trials};
  host.progress = [&](int k, int n) {
    done.store(k);
    total.store(n);
  };
  // And the layers reached over all trials (of trials x (L + 1)), for a progress per layer.
  std::atomic<long long> layers{0};
  host.layers_done = &layers;
  const long long layers_total = static_cast<long long>(c.run.trials) * (c.model.layers + 1);
  int reported = -1;
  long long reported_layers = -1;
  const auto report = [&] {
    if (progress && done.load() != reported) {
      reported = done.load();
      (*progress)(reported, total.load());
    }
    if (layer_progress && layers.load() != reported_layers) {
      reported_layers = std::min(layers.load(), layers_total);
      (*layer_progress)(reported_layers, layers_total);
    }
  };
  // The run on a worker thread (Ctrl-C stops it within one block: KeyboardInterrupt).
  std::vector<char> image = run_interruptible(
      [&](const std::atomic<bool>* cancel) { return rcsim::run_to_image(c, prov, cancel, host); }, report);
  report();
  return py::bytes(image.data(), image.size());
}

// The token measures of each N x d matrix of a (B, N, d) array (docs/science/model-spec.md section 4, the
// functions of the run's /metrics): a dict name -> array [B], and "sigma" [B, min(N, d)].
py::dict token_measures(const DoubleArray& x, double rank_rtol, double rank_atol) {
  if (x.ndim() != 3) throw rcsim::UsageError("rcsim.measures: expected an array (B, N, d)");
  const auto B = x.shape(0), N = x.shape(1), d = x.shape(2);
  if (N < 1 || d < 1) throw rcsim::UsageError("rcsim.measures: N and d must be at least 1");
  const auto& info = rcsim::token_measure_info();
  std::vector<py::array_t<double>> out;
  for (std::size_t m = 0; m < info.size(); ++m) out.emplace_back(B);
  py::array_t<double> sigma({B, std::min(N, d)});
  {
    py::gil_scoped_release no_gil;
    const rcsim::MeasureOptions opt{rank_rtol < 0 ? static_cast<double>(std::max(N, d)) * 2.220446049250313e-16
                                                  : rank_rtol,
                                    rank_atol, static_cast<int>(std::min(N, d))};
    rcsim::Vector s;
    for (py::ssize_t b = 0; b < B; ++b) {
      const Eigen::Map<const rcsim::RowMajorMatrix> X(x.data(b, 0, 0), N, d);
      const auto values = rcsim::token_measure_values(rcsim::measure_tokens(X, opt, s));
      for (std::size_t m = 0; m < values.size(); ++m) out[m].mutable_at(b) = values[m];
      for (Eigen::Index i = 0; i < s.size(); ++i) sigma.mutable_at(b, i) = s(i);
    }
  }
  py::dict result;
  for (std::size_t m = 0; m < info.size(); ++m) result[info[m].name] = out[m];
  result["sigma"] = sigma;
  return result;
}

// The clusters of one N x d matrix at threshold tau (kernel/measures/clusters.hpp, cluster_partition):
// label [N] (0..k-1 in order of first token), size [k], centre [k, d].
py::dict cluster_partition(const DoubleArray& x, double tau) {
  if (x.ndim() != 2) throw rcsim::UsageError("rcsim.clusters: expected an array (N, d)");
  const auto N = x.shape(0), d = x.shape(1);
  rcsim::ClusterPartition p;
  {
    py::gil_scoped_release no_gil;
    const Eigen::Map<const rcsim::RowMajorMatrix> X(x.data(0, 0), N, d);
    p = rcsim::cluster_partition(X, tau);
  }
  const auto k = static_cast<py::ssize_t>(p.size.size());
  py::array_t<int> label(N), size(k);
  py::array_t<double> centre({k, d});
  for (py::ssize_t i = 0; i < N; ++i) label.mutable_at(i) = p.label[static_cast<std::size_t>(i)];
  for (py::ssize_t c = 0; c < k; ++c) {
    size.mutable_at(c) = p.size[static_cast<std::size_t>(c)];
    for (py::ssize_t j = 0; j < d; ++j) centre.mutable_at(c, j) = p.centre(c, j);
  }
  py::dict result;
  result["label"] = label;
  result["size"] = size;
  result["centre"] = centre;
  return result;
}

// [A, B, rows, cols] from blocks x heads of equally shaped matrices (empty: no such parameter).
py::array_t<double> stack4(const std::vector<std::vector<rcsim::Matrix>>& m) {
  if (m.empty() || m.front().empty()) return py::array_t<double>();
  const auto A = static_cast<py::ssize_t>(m.size()), B = static_cast<py::ssize_t>(m.front().size());
  const auto R = m.front().front().rows(), C = m.front().front().cols();
  py::array_t<double> out({A, B, static_cast<py::ssize_t>(R), static_cast<py::ssize_t>(C)});
  for (py::ssize_t a = 0; a < A; ++a)
    for (py::ssize_t b = 0; b < B; ++b)
      for (Eigen::Index i = 0; i < R; ++i)
        for (Eigen::Index j = 0; j < C; ++j) out.mutable_at(a, b, i, j) = m[a][b](i, j);
  return out;
}

// The gradients of one trial (kernel/trial/simulation.hpp, trial_gradients) as NumPy arrays by the
// input arrays' names: dX [L+1, N, d]; W_Q, W_K, W_V (W_O) [L, H, rows, cols] (W_K, W_V, b_K, b_V:
// H_kv with model.kv_heads, summed over the query heads that share them); W_in, W_out
// [L, 1, rows, cols] and b_in, b_out [L, 1, 1, n] with an MLP; b_Q, b_K, b_V [L, H, 1, n] and
// b_O [L, 1, 1, d] with attention biases; norm_gain, norm_bias [L, 4, 1, d] (slots attn,
// attn_out, mlp, mlp_out); and X, the output X(L) [N, d].
py::dict gradients(const std::vector<std::string>& keys, const std::optional<std::string>& config_file,
                   const std::map<std::string, DoubleArray>& arrays,
                   const std::optional<py::array_t<std::uint8_t, py::array::c_style>>& mask,
                   const DoubleArray& cotangent, int trial) {
  const rcsim::Config c = resolve(keys, config_file, "rcsim.gradients");
  rcsim::HostInputs host = host_inputs(c, arrays, mask, "rcsim.gradients");
  if (cotangent.ndim() != 2)
    throw rcsim::UsageError("rcsim.gradients cotangent: a 2-d array [N, d] is needed, got " +
                            std::to_string(cotangent.ndim()) + " dimensions");
  const rcsim::Matrix C = Eigen::Map<const rcsim::RowMajorMatrix>(cotangent.data(), cotangent.shape(0), cotangent.shape(1));
  // On a worker thread: Ctrl-C stops the forward or reverse pass within one block (KeyboardInterrupt).
  const rcsim::TrialGradients g = run_interruptible([&](const std::atomic<bool>* cancel) {
    const rcsim::EngineSetup s = rcsim::prepare_host(c, host);
    return rcsim::trial_gradients(s, trial, C, cancel);
  });
  // One stack per parameter (kernel/model/parameters.hpp), over the blocks that have it.
  using Stack = std::vector<std::vector<rcsim::Matrix>>;
  const auto& table = rcsim::parameter_table();
  std::vector<Stack> stacks(table.size());
  for (const rcsim::BlockGrads& b : g.blocks) {
    std::size_t i = 0;
    rcsim::for_each_parameter(
        [&](const rcsim::ParameterInfo&, const auto& member) {
          Stack& s = stacks[i++];
          if (rcsim::pieces_of(member) == 0 || rcsim::piece(member, 0).size() == 0) return;
          s.emplace_back();
          for (std::size_t h = 0; h < rcsim::pieces_of(member); ++h)
            s.back().push_back(rcsim::Matrix(rcsim::piece(member, h)));
        },
        b);
  }
  py::dict out;
  const auto put = [&](const char* name, const Stack& m) {
    if (!m.empty() && !m.front().empty() && m.front().front().size() > 0) out[name] = stack4(m);
  };
  put("dX", {g.dX});
  out["dX"] = out["dX"].attr("reshape")(py::make_tuple(g.dX.size(), c.model.tokens, c.model.dim));
  for (std::size_t i = 0; i < table.size(); ++i) put(table[i].name, stacks[i]);
  out["X"] = stack4({{g.output}}).attr("reshape")(py::make_tuple(c.model.tokens, c.model.dim));
  return out;
}

// A sweep's progress as rcsim.sweep's callback receives it (python/rcsim/sweeps.py): the counts,
// the fraction of the work done, seconds elapsed and left (NaN until known), and the CLI's line.
py::dict progress_dict(const rcsim::ProgressState& s) {
  py::dict d;
  d["trials_done"] = s.trials_done;
  d["trials"] = s.trials_total;
  d["point"] = s.point;
  d["points"] = s.points;
  d["name"] = s.name;
  d["fraction"] = s.fraction;
  d["elapsed"] = s.elapsed;
  d["eta"] = s.eta;
  d["line"] = rcsim::Progress::describe(s, true);
  return d;
}

// A sweep over key values (rcsim.sweep, python/rcsim/sweeps.py): the configuration's points
// (keys, sweep.KEY axes and sweep.mode over config_file over the key defaults, as `rcsim run`
// resolves them) run by the command line's runner (app/sweep_runner.hpp) into their files and the
// index, with the GIL released; complete points are skipped. `progress` (may be None) is called on
// this thread with progress_dict's dict of every state of the runner's progress (each trial, each
// point's start and end), in order, every 0.1 s and at the end. Returns the index's path and counts; a failed point raises
// (ConfigError when it failed on its configuration).
py::dict sweep(const std::vector<std::string>& keys, const std::optional<std::string>& config_file, bool force,
               bool quiet, const std::string& call, const std::string& who,
               const std::optional<std::function<void(py::dict)>>& progress) {
  spdlog::set_level(quiet ? spdlog::level::warn : spdlog::level::info);
  const std::string where = "given to " + who;
  rcsim::RunRequest request;
  request.sources = rcsim::parse_config_sources(keys, config_file, {}, where);
  const rcsim::ParsedArgs given = rcsim::parse_config_sources(keys, std::nullopt, {}, where);
  auto& axes = request.sources.sweep;
  axes.erase(std::remove_if(axes.begin(), axes.end(), [&](const auto& a) { return given.values.count(a.first) > 0; }),
             axes.end());
  if (axes.empty())
    throw rcsim::UsageError(who + ": no key to sweep (give axes={'model.tokens': [4, 8]}, or a configuration file "
                            "with a [sweep] section); rcsim.simulate runs one configuration");
  request.force = force;
  request.quiet = true;  // no progress lines on stderr from the engine; `quiet` sets the log level
  request.command_line = call;
  // The runner's thread queues every state; this thread hands them to Python between waits.
  std::mutex mutex;
  std::vector<rcsim::ProgressState> queued;
  if (progress)
    request.progress = [&](const rcsim::ProgressState& s) {
      std::lock_guard<std::mutex> lock(mutex);
      queued.push_back(s);
    };
  const auto report = [&] {
    std::vector<rcsim::ProgressState> states;
    {
      std::lock_guard<std::mutex> lock(mutex);
      states.swap(queued);
    }
    for (const rcsim::ProgressState& s : states) (*progress)(progress_dict(s));
  };
  std::ostringstream ignored;  // the dry run's report (not used here)
  const rcsim::RunOutcome o = run_interruptible(
      [&](const std::atomic<bool>* cancel) {
        request.cancel = cancel;
        return rcsim::run_points(request, ignored);
      },
      report);
  report();
  if (o.failed > 0) {
    const std::string what = who + ": " + std::to_string(o.failed) + " of " + std::to_string(o.points) +
                             " points failed (their errors are logged; the index marks them failed: " + o.index_path +
                             ")";
    if (o.exit_code == 2) throw rcsim::UsageError(what);
    throw std::runtime_error(what);
  }
  py::dict out;
  out["index"] = o.index_path;
  out["points"] = o.points;
  out["complete"] = o.complete;
  return out;
}

}  // namespace

PYBIND11_MODULE(_engine, m) {
  // Eigen's blocking as rcsim's main() fixes it (kernel/block/layer.hpp): the module gives the CLI's bits.
  rcsim::fix_product_blocking();
  m.doc() = "rcsim's engine in this process (use rcsim.simulate; docs/user/python.md)";
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
      PyErr_SetString(PyExc_KeyboardInterrupt, "rcsim interrupted");
    }
  });
  m.def("run_image", &run_image, py::arg("keys"), py::arg("config_file") = std::nullopt,
        py::arg("call") = "rcsim.simulate()", py::arg("quiet") = true,
        py::arg("arrays") = std::map<std::string, DoubleArray>{}, py::arg("mask") = std::nullopt,
        py::arg("progress") = std::nullopt, py::arg("who") = "rcsim.simulate",
        py::arg("layer_progress") = std::nullopt,
        "Run one configuration (keys as '--section.key=value', over config_file, over the key "
        "defaults) and return the bytes of its HDF5 run file.");
  m.def("gradients", &gradients, py::arg("keys"), py::arg("config_file") = std::nullopt,
        py::arg("arrays") = std::map<std::string, DoubleArray>{}, py::arg("mask") = std::nullopt,
        py::arg("cotangent"), py::arg("trial") = 0,
        "The gradients of a loss of X(L) with cotangent dL/dX(L) [N, d], for one trial of the "
        "configuration: dict dX, W_Q, W_K, W_V, ... (python/rcsim/engine.py: rcsim.gradients).");
  m.def("sweep", &sweep, py::arg("keys"), py::arg("config_file") = std::nullopt, py::arg("force") = false,
        py::arg("quiet") = true, py::arg("call") = "rcsim.sweep()", py::arg("who") = "rcsim.sweep",
        py::arg("progress") = std::nullopt,
        "Run every point of a sweep (keys with sweep.KEY axes, over config_file, over the key defaults) into "
        "its files and index, as `rcsim run` does; dict index, points, complete. progress(dict) is called "
        "at every trial and point: trials_done, trials, point, points, name, fraction (of the work), "
        "elapsed, eta (s), line.");
  m.def("resolved_config", [](const std::vector<std::string>& keys, const std::optional<std::string>& config_file) {
    return resolve(keys, config_file, "rcsim.resolved_config").to_ini_explained();
  }, py::arg("keys"), py::arg("config_file") = std::nullopt,
        "The fully resolved configuration (INI text) that run_image would run.");
  m.def("token_measures", &token_measures, py::arg("x"), py::arg("rank_rtol") = -1.0, py::arg("rank_atol") = 0.0,
        "The token measures of each matrix of a (B, N, d) float64 array: dict name -> [B], sigma [B, min(N, d)].");
  m.def("cluster_partition", &cluster_partition, py::arg("x"), py::arg("tau"),
        "The clusters of an (N, d) float64 array at cosine threshold tau: dict label [N], size [k], centre [k, d].");
  m.def("keep_freed_memory", &rcsim::keep_freed_memory,
        "Tune glibc's allocator for repeated trials (process-wide; what rcsim's main() does).");
  register_llama(m);
  m.attr("version") = rcsim::version();
  m.attr("instruction_set") = rcsim::instruction_set();
  m.attr("git_sha") = rcsim::git_sha();
}
