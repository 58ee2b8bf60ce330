#include "app/run.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "io/checkpoint.hpp"
#include "io/input_digest.hpp"
#include "io/inputs.hpp"
#include "io/output_file.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/platform/platform_opencl.hpp"

namespace rcsim {

namespace {

// dynamics.integrator = rk4: once per run, when a step met dt L beyond RK4's real-axis stability
// interval (-2.785, 0] (L the field's Lipschitz constant between the step's last two stage points;
// kernel/block/layer.cpp, rk4_stiffness): the integration may drift without failing.
void rk4_stability_warning(const RunResults& r) {
  int stiff = 0;
  double worst = 0.0;
  for (const double s : r.rk4_stiffness) {
    stiff += s > kRk4StabilityLimit;
    worst = std::max(worst, s);
  }
  if (stiff)
    spdlog::warn("dynamics.integrator = rk4: {} of {} trials took steps beyond RK4's stability bound, dt L up to "
                 "{:.3g} > {} (L the field's Lipschitz constant estimated from the step's stages): the flow may "
                 "drift; give a smaller residual.alpha (dt)", stiff, r.trials, worst, kRk4StabilityLimit);
}

// The run's diagnostics on the log (they are recorded in the file too).
void report_diagnostics(const RunResults& r) {
  int underflow = 0, nonfinite = 0, degenerate = 0;
  for (int t = 0; t < r.trials; ++t) {
    underflow += r.underflow_layer[static_cast<std::size_t>(t)] >= 0;
    nonfinite += r.nonfinite_layer[static_cast<std::size_t>(t)] >= 0;
    degenerate += r.degenerate_total[static_cast<std::size_t>(t)];
  }
  // Expected in a collapsing run (and recorded in the file): information, not a warning.
  if (underflow) spdlog::info("{} of {} trials: mu underflowed below DBL_MIN (see /diagnostics/underflow_layer)", underflow, r.trials);
  if (nonfinite) spdlog::warn("{} of {} trials: tokens became non-finite and the trial stopped (see /diagnostics/nonfinite_layer)", nonfinite, r.trials);
  if (degenerate) spdlog::warn("{} degenerate rows in the normalisation (see /metrics/degenerate_rows)", degenerate);
  rk4_stability_warning(r);
}

}  // namespace

std::string run_to_file(const Config& c, const Provenance& p, const std::atomic<bool>* cancel, bool show_progress) {
  Progress progress(show_progress ? Progress::Mode::log : Progress::Mode::off, c.run.trials, 1, 2.0);
  progress.begin_point(c.output.file, c.run.trials);
  return run_to_file(c, p, cancel, &progress);
}

std::string run_to_file(const Config& c, const Provenance& p, const std::atomic<bool>* cancel, Progress* progress) {
  const std::string& out = c.output.file;
  require_run_memory(c);
  // One process per output: a second run on the same file stops here, before any computing; the
  // temporary is created now, so an unwritable destination fails fast too.
  OutputFile file(out, {"output.file", "output '" + out + "'", {out + ".partial"}});
  // The inputs' content is part of the run's identity: hashed before they are read, and
  // checked unchanged after (io/input_digest.hpp).
  const InputDigests inputs = input_digests(c);
  const EngineSetup s = prepare(c);
  check_inputs_unchanged(inputs);
  if (!s.graph.quasi_strongly_connected)
    spdlog::warn("mask is not quasi-strongly connected: the collapse theorem does not apply");
  const int threads = resolve_threads(c.run.threads, c.run.trials);
  if (s.platform == Platform::opencl)  // which device ran, on the log too (the file records it)
    spdlog::info("run.platform = opencl on {}: {} trials in flight", opencl_device(),
                 trial_workers(s, threads, c.run.trials));
  RunResults r = allocate_results(s);
  Checkpoint checkpoint(out + ".partial", c.to_ini(), inputs);
  const std::vector<char> done = checkpoint.load(r);
  RunControl ctl;
  ctl.cancel = cancel;
  ctl.on_trial_done = [&](int trial) { checkpoint.completed(r, trial); };
  if (progress) {
    int todo = 0;
    for (const char x : done) todo += !x;
    progress->trials_done(0, todo);
    ctl.progress = [&](int k, int total) { progress->trials_done(k, total); };
  }
  try {
    run_trials(s, threads, r, done, ctl);
  } catch (...) {
    if (progress) progress->clear();
    checkpoint.flush(r);  // completed trials survive; a rerun resumes from them
    throw;
  }
  if (progress) progress->clear();
  // A run that has a checkpoint (resumed, or flushed while it ran: longer than the interval, or
  // more large data than the cap) checkpoints its last trials too: a run file that cannot be
  // written (full disk) leaves every trial resumable, and the writer reads every trial's large
  // data from the checkpoint. A run that never flushed has all its results in memory, under the
  // cap, and writes no checkpoint (docs/dev/memory.md).
  if (checkpoint.written()) checkpoint.flush(r);
  report_diagnostics(r);
  Provenance prov = p;
  prov.threads = trial_workers(s, threads, c.run.trials);  // opencl: its batch
  write_run_file(file.temporary(), c.to_ini(), s, r, prov, inputs, &checkpoint);  // closed and checked before the rename
  file.publish();
  checkpoint.remove();
  return out;
}

std::vector<char> run_to_image(const Config& c, const Provenance& p, const std::atomic<bool>* cancel) {
  return run_to_image(c, p, cancel, HostInputs{});
}

EngineSetup prepare_host(const Config& c, const HostInputs& host) {
  if (host.mask && c.mask.type != MaskType::custom)
    throw UsageError("a mask array was given but key 'mask.type' is not custom");
  // make_mask (in prepare) checks the host's mask as it checks mask.file's: shape N x N, self-loops.
  // A built-in mask is made by prepare from its ranges (as N x N only where the run needs it).
  const MaskMatrix mask = host.mask ? *host.mask : c.mask.type == MaskType::custom ? load_mask(c) : MaskMatrix();
  return prepare(c, &mask, host.arrays ? *host.arrays : load_inputs(c));
}

std::vector<char> run_to_image(const Config& c, const Provenance& p, const std::atomic<bool>* cancel,
                               const HostInputs& host) {
  require_run_memory(c, true);  // the file's image too (in memory, then copied out)
  // The digests of the files read (not of the arrays the host gave): as run_to_file records them.
  const InputDigests inputs = input_digests(c, !host.arrays, !host.mask);
  const EngineSetup s = prepare_host(c, host);
  check_inputs_unchanged(inputs);
  if (!s.graph.quasi_strongly_connected)
    spdlog::warn("mask is not quasi-strongly connected: the collapse theorem does not apply");
  const int threads = resolve_threads(c.run.threads, c.run.trials);
  const RunResults r = run_simulation(s, threads, cancel, host.progress, host.layers_done);
  report_diagnostics(r);
  Provenance prov = p;
  prov.threads = trial_workers(s, threads, c.run.trials);  // opencl: its batch
  // HDF5's core driver refuses a second open file of the same name: each image gets its own, so
  // that Python threads may call simulate() at once (the name labels messages only; it is not in
  // the image).
  static std::atomic<unsigned long> images{0};
  const std::string name = (c.output.file.empty() ? std::string("run.h5") : c.output.file) + " (in memory, #" +
                           std::to_string(++images) + ")";
  return run_file_image(name, c.to_ini(), s, r, prov, inputs);
}

}  // namespace rcsim
