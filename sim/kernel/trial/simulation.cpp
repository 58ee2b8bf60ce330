#include "kernel/trial/simulation.hpp"

#include <algorithm>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "kernel/trial/derivative_measures.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/measures/metrics.hpp"
#include "kernel/platform/platform_opencl.hpp"
#include "kernel/support/threads.hpp"
#include "kernel/trial/trial.hpp"
#include "kernel/trial/trial_batch.hpp"
#include "kernel/trial/trial_tape.hpp"

namespace rcsim {

namespace {

// The measures of X(t) (every layer: the underflow test; recorded layers: the token measures and
// the spectrum) and its snapshot (output.tokens).
struct LayerRecorder {
  LayerRecorder(const EngineSetup& setup, RunResults& results, int trial_index)
      : s(setup), r(results), trial(trial_index), ti(static_cast<std::size_t>(trial_index)),
        opt{setup.config.metrics.rank_rtol, setup.config.metrics.rank_atol, setup.max_rank_input} {}
  const EngineSetup& s;
  RunResults& r;
  const int trial;
  const std::size_t ti;
  MeasureOptions opt;
  Vector sigma;
  std::size_t next_snapshot = 0;

  void tokens(int t, const Matrix& X) {
    if (const int col = r.column_of_layer[static_cast<std::size_t>(t)]; col >= 0) {  // output.schedule
      const TokenMeasures m = measure_tokens(X, opt, sigma);
      record_tokens(s.config, m, X, sigma, trial, col, r);
      if (!r.spectrum.empty()) r.spectrum[ti].row(col) = sigma.transpose();
      if (r.underflow_layer[ti] < 0 && !(m.mu >= std::numeric_limits<double>::min())) r.underflow_layer[ti] = t;
    } else if (r.underflow_layer[ti] < 0 && !(token_similarity(X) >= std::numeric_limits<double>::min())) {
      r.underflow_layer[ti] = t;  // underflow is detected at every layer, recorded or not
    }
    const auto& snap_layers = s.config.output.token_layers;
    if (next_snapshot < snap_layers.size() && snap_layers[next_snapshot] == t) {
      r.snapshots[ti].push_back(X);
      ++next_snapshot;
    }
    opt.max_rank = s.max_rank;  // layers 1..L
  }
  // Snapshots and attention matrices of layers never reached (non-finite tokens) are NaN.
  void pad() {
    const int N = s.config.model.tokens, d = s.config.model.dim;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    while (!r.snapshots.empty() && r.snapshots[ti].size() < s.config.output.token_layers.size())
      r.snapshots[ti].push_back(Matrix::Constant(N, d, nan));
    while (!r.attention_matrices.empty() && r.attention_matrices[ti].size() < r.attention_layer_index.size())
      r.attention_matrices[ti].push_back(Matrix::Constant(N, N, nan));
  }
};

// One trial's measures: of X(t) before block t (observe), of the block (step), and at the end
// (finish). Each writes only row `trial` of the results.
struct MeasuredTrial {
  MeasuredTrial(const EngineSetup& setup, RunResults& results, int trial_index, const std::atomic<bool>* cancel)
      : s(setup), r(results), trial(trial_index), ti(static_cast<std::size_t>(trial_index)),
        tape(setup, trial_index, setup.gradient_segment, cancel), layer(setup, results, trial_index),
        want_product(wants_pass(setup.config, MeasurePass::attention_product)),
        want_update(wants_pass(setup.config, MeasurePass::update)) {
    const int N = s.config.model.tokens;
    if (want_product) product = Matrix::Identity(N, N);
    if (s.config.output.attention) r.attention_matrices[ti].clear();
    if (!r.spectrum.empty())
      r.spectrum[ti] = Matrix::Constant(static_cast<Eigen::Index>(r.layer_index.size()), r.spectrum_size,
                                        std::numeric_limits<double>::quiet_NaN());
  }
  const EngineSetup& s;
  RunResults& r;
  const int trial;
  const std::size_t ti;
  TrialTape tape;  // for the derivative measures
  LayerRecorder layer;
  // The attention measures of the product of the blocks' attention (docs/science/peers.md).
  const bool want_product, want_update;
  Matrix product;
  Matrix X_previous;  // the block's input, for the update measures

  // X(t) measured; whether block t is to run.
  bool observe(const Trial& tr, int t) {
    if (!all_finite(tr.tokens())) {
      r.nonfinite_layer[ti] = t;
      return false;
    }
    layer.tokens(t, tr.tokens());
    return t < s.config.model.layers;
  }
  void step(Trial& tr, int t) {
    const ModelSpec& c = s.config;
    if (want_update) X_previous = tr.tokens();
    const LayerReport rep = tape.step(tr);
    if (want_product) product = tr.attention_mean() * product;
    if (const int acol = r.column_of_attention_layer[static_cast<std::size_t>(t)]; acol >= 0) {
      record_attention(c, rep, tr.attention_mean(), product, trial, acol, r);
      if (c.output.attention) r.attention_matrices[ti].push_back(tr.attention_mean());
    }
    if (want_update) record_update(X_previous, tr.tokens(), t, trial, r);
    r.degenerate_total[ti] += rep.degenerate_rows;
    r.rk4_stiffness[ti] = std::max(r.rk4_stiffness[ti], rep.rk4_stiffness);
  }
  void finish(const Trial& tr) {
    const ModelSpec& c = s.config;
    if (r.nonfinite_layer[ti] < 0 && tape.recording())
      record_gradients(c, tape.length(), s.jacobian_chunk > 0 ? s.jacobian_chunk : jacobian_chunk_layers(c),
                       tape.segments(), tr.params(), trial, r);
    layer.pad();
  }
};

}  // namespace

bool run_batch(const EngineSetup& s, const std::vector<int>& trials, RunResults& r, const std::atomic<bool>* cancel,
               LayerCount* layers) {
  const int L = s.config.model.layers, B = static_cast<int>(trials.size());
  TrialBatch batch(s, trials);
  batch.set_cancel(cancel);  // every block loop, the derivative measures' too, stops within one block
  std::vector<char> finished(static_cast<std::size_t>(B), 0);
  // Each trial from X(0) to X(L) (or its non-finite layer): on the reference and cpu platforms one
  // after another, on opencl all at once on the batch's threads, each round of their blocks'
  // attention calls one launch.
  batch.for_each([&](int b, Trial& tr) {
    MeasuredTrial m(s, r, trials[static_cast<std::size_t>(b)], cancel);
    for (int t = 0; t <= L; ++t) {
      if (cancel && cancel->load(std::memory_order_relaxed)) return;
      if (layers) layers->fetch_add(1, std::memory_order_relaxed);  // a progress per layer
      if (!m.observe(tr, t)) break;
      m.step(tr, t);
    }
    m.finish(tr);
    finished[static_cast<std::size_t>(b)] = 1;
  });
  return std::all_of(finished.begin(), finished.end(), [](char f) { return f != 0; });
}

bool run_trial(const EngineSetup& s, int trial_index, RunResults& r, const std::atomic<bool>* cancel,
               LayerCount* layers) {
  return run_batch(s, {trial_index}, r, cancel, layers);
}

TrialGradients trial_gradients(const EngineSetup& s, int trial_index, const Matrix& cotangent,
                               const std::atomic<bool>* cancel) {
  const ModelSpec& c = s.config;
  const int N = c.model.tokens, d = c.model.dim, L = c.model.layers;
  if (cotangent.rows() != N || cotangent.cols() != d)
    throw UsageError("gradients: the cotangent dL/dX(L) must be [N, d] = [" + std::to_string(N) + ", " +
                     std::to_string(d) + "], got [" + std::to_string(cotangent.rows()) + ", " +
                     std::to_string(cotangent.cols()) + "]");
  Trial trial(s, trial_index);  // the forward as run_trial runs it, every block kept
  trial.set_cancel(cancel);     // polled by every block of the forward and reverse passes
  BlockTape tape;
  for (int t = 0; t < L; ++t) step_recorded(trial, tape);
  // The reverse pass reads the dense mask: made here if the setup has none (the cpu platform's).
  const MaskMatrix dense = s.mask.size() ? MaskMatrix() : dense_mask(ranges_of(s.rows));
  BlockParams params = trial.params();
  if (!s.mask.size()) params.layer.mask = &dense;
  TrialGradients out;
  out.output = trial.tokens();
  out.blocks.resize(static_cast<std::size_t>(L));
  out.dX.resize(static_cast<std::size_t>(L) + 1);
  stack_backward_segments(
      L, std::max(L, 1), [&](int, int, BlockTape& seg) { seg = tape; }, params, cotangent,
      [&](int t, const Matrix& dX) { out.dX[static_cast<std::size_t>(t)] = dX; },
      [&](int t, const BlockGrads& g) { out.blocks[static_cast<std::size_t>(t)] = g; });
  return out;
}

int resolve_threads(int requested, int trials) {
  int n = requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, std::min(n, trials));
}

int trial_workers(const EngineSetup& s, int threads, int trials) {
  if (s.platform == Platform::opencl) return std::max(1, std::min(trials, opencl_batch_size()));
  return resolve_threads(threads, trials);
}

int trial_batch_size(const ModelSpec& c, Platform platform, int threads, int trials) {
  trials = std::max(trials, 1);
  if (platform == Platform::opencl) return std::min(trials, opencl_batch_size());
  if (wants_gradients(c) || trial_work_bytes(c) + trial_large_bytes(c) > kSmallTrialBytes) return 1;
  const int workers = resolve_threads(threads, trials);
  return std::max(1, std::min(kHostBatch, trials / (2 * workers)));  // at least 2 batches per worker
}

int trial_batch_size(const EngineSetup& s, int threads, int trials) {
  return trial_batch_size(s.config, s.platform, threads, trials);
}

void run_trials(const EngineSetup& s, int threads, RunResults& r, const std::vector<char>& skip,
                const RunControl& ctl) {
  const int T = s.config.run.trials;
  std::vector<int> todo;
  for (int t = 0; t < T; ++t)
    if (skip.empty() || !skip[static_cast<std::size_t>(t)]) todo.push_back(t);
  const int total = static_cast<int>(todo.size());
  const int B = ctl.batch > 0 ? ctl.batch : trial_batch_size(s, threads, total);
  const int batches = (total + B - 1) / B;
  // The opencl platform: one worker, its batch's trials on the batch's own threads (TrialBatch).
  const int n_threads = std::max(1, std::min(s.platform == Platform::opencl ? 1 : resolve_threads(threads, total),
                                             batches));
  std::atomic<int> next{0};
  int done = 0;
  std::exception_ptr error;
  std::mutex mutex;
  auto worker = [&] {
    try {
      for (;;) {
        if (ctl.cancel && ctl.cancel->load()) return;
        const int k = next.fetch_add(1);
        if (k >= batches) return;
        const auto first = todo.begin() + static_cast<std::ptrdiff_t>(k) * B;
        const std::vector<int> trials(first, first + std::min<std::ptrdiff_t>(B, todo.end() - first));
        if (!run_batch(s, trials, r, ctl.cancel, ctl.layers_done)) return;  // each trial writes only its own rows
        std::lock_guard<std::mutex> lock(mutex);
        for (const int trial : trials) {
          ++done;
          if (ctl.on_trial_done) ctl.on_trial_done(trial);
          if (ctl.progress) ctl.progress(done, total);
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      next.store(batches);
    }
  };
  if (n_threads == 1) {
    worker();
  } else {  // a thread the system refuses: one error naming run.threads, never std::terminate
    run_workers(n_threads, false, worker, [&] { next.store(batches); }, "run.threads", n_threads);
  }
  if (error) std::rethrow_exception(error);
  if (ctl.cancel && ctl.cancel->load()) throw Interrupted();
}

RunResults run_simulation(const EngineSetup& s, int threads, const std::atomic<bool>* cancel,
                          const std::function<void(int, int)>& progress, std::atomic<long long>* layers_done) {
  RunResults r = allocate_results(s);
  RunControl ctl;
  ctl.cancel = cancel;
  ctl.progress = progress;
  ctl.layers_done = layers_done;
  run_trials(s, threads, r, {}, ctl);
  return r;
}

}  // namespace rcsim
