// Benchmark worker for bench/run_bench.py (not a unit test). Reads commands from stdin, one per
// line, and answers each with one line on stdout:
//   peak SIZE THREADS        -> "peak GFLOPS SECONDS": THREADS threads each multiply two SIZE x SIZE
//                               float64 matrices with Eigen (C = A B), timed together
//   run N D MASK MEASURES TRIALS LAYERS THREADS [SCHEDULE [PRECISION]]
//                            -> "run SECONDS": the engine on the benchmark workload (LayerNorm,
//                               Gaussian inputs and fresh Gaussian weights per layer, d_k = d,
//                               one head). MEASURES = 1 runs rcsim's run_simulation (every measure
//                               at the layers of output.schedule = SCHEDULE, default all) with
//                               run.precision = PRECISION (float64, the default, or float32);
//                               MEASURES = 0 runs the same trial loop without measures (weights,
//                               attention layer, normalisation only; float64 only).
//   profile N D MASK TRIALS LAYERS
//                            -> "profile name=MICROSECONDS ...": one thread, the benchmark workload's
//                               trial loop taken apart, each stage timed separately and summed over
//                               TRIALS x LAYERS layer steps, the median over them (microseconds):
//                               weights, logits, softmax (with the attention diagnostics), the
//                               products X W_V and A (X W_V), normalisation; the token measures
//                               the way measure_tokens computes them: scaling + QR, bidiagonalisation,
//                               dqds, ||X||_F, mu, the sigma-derived measures, cos_abs_mean; and
//                               measure_tokens itself on the same X (the total, for a check); the QR
//                               also as Eigen's HouseholderQR runs it (m_qr_eigen48: the A/B of
//                               qr_block_size); then the counts of subnormal entries of X and of
//                               the attention matrix per layer. With RCSIM_PROFILE_ALL set in the
//                               environment, every sample first ("samples NAME us us ...").
//   grad N D MASK TRIALS LAYERS THREADS
//                            -> "grad SECONDS FORWARD BACKWARD": the gradient of the benchmark
//                               workload's readout loss L = 1^T X(L) R (docs/science/gradients.md)
//                               with respect to X(0) and every layer's W_Q, W_K, W_V, per trial as
//                               the engine computes it for the gradient measures: the forward pass
//                               (transformer_block, keeping each block's input and weights), then
//                               the reverse pass (stack_backward). SECONDS is the wall time;
//                               FORWARD and BACKWARD the two phases' seconds summed over threads
//   estimate N D MASK TRIALS LAYERS THREADS
//                            -> "estimate BYTES": run_memory_bytes of that run (what --dry-run prints)
//   schedule SPEC LAYERS     -> "schedule L0 L1 ...": the layers output.schedule = SPEC measures
//   info                     -> "info SIMD LIBS": Eigen's instruction sets in this build and the
//                               BLAS/LAPACK libraries mapped into the process (rcsim's LAPACK)
//   quit
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <fstream>
#include <set>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/inputs.hpp"
#include "config/config.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/model/random.hpp"
#include "kernel/measures/metrics.hpp"
#include "kernel/ops/attention.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/block/block.hpp"
#include "kernel/block/gradients.hpp"
#include "kernel/trial/trial.hpp"
#include "kernel/trial/trial_tape.hpp"

#include <Eigen/QR>
#include <Eigen/SVD>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>

extern "C" void dlasq1_(const int* n, double* d, double* e, double* work, int* info);

using namespace rcsim;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Aggregate GFLOP/s of `threads` concurrent SIZE^3 products (2 SIZE^3 flops each).
double peak(int size, int threads, double& secs) {
  std::vector<Matrix> A, B, C;
  for (int i = 0; i < threads; ++i) {
    A.push_back(Matrix::Random(size, size));
    B.push_back(Matrix::Random(size, size));
    C.push_back(Matrix::Zero(size, size));
  }
  for (int i = 0; i < threads; ++i) C[i].noalias() = A[i] * B[i];  // warm-up
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { C[i].noalias() = A[i] * B[i]; });
  for (auto& th : pool) th.join();
  secs = seconds_since(t0);
  return 2.0 * size * double(size) * size * threads / secs / 1e9;
}

// The engine's trial loop without measures: each trial stepped (kernel/trial/trial.hpp) as run_trial
// steps it.
void run_without_measures(const EngineSetup& s, int threads) {
  const ModelSpec& c = s.config;
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int trial; (trial = next.fetch_add(1)) < c.run.trials;) {
      Trial step(s, trial);
      for (int t = 0; t < c.model.layers && all_finite(step.tokens()); ++t) step.step();
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
}

// `grad`: the gradient of the readout loss for every trial (see the header comment); the seconds of
// the forward and of the reverse phase, summed over the threads.
struct PhaseSeconds {
  double forward = 0, backward = 0;
};
PhaseSeconds run_gradients(const EngineSetup& s, int threads) {
  const ModelSpec& c = s.config;
  std::atomic<int> next{0};
  std::mutex mutex;
  PhaseSeconds total;
  double checksum = 0;  // uses every gradient, so that none is optimised away
  auto worker = [&] {
    const int N = c.model.tokens, L = c.model.layers;
    PhaseSeconds mine;
    double sum = 0;
    for (int trial; (trial = next.fetch_add(1)) < c.run.trials;) {
      const auto t0 = Clock::now();
      Trial step(s, trial);  // the forward as trial_gradients runs it, every block kept
      BlockTape tape;
      for (int t = 0; t < L; ++t) step_recorded(step, tape);
      const auto t1 = Clock::now();
      const Matrix dXL = readout_cotangent(N, readout(c, trial));
      const std::vector<Matrix> dX = stack_backward(tape.inputs, tape.weights, step.params(), dXL, [&](int, const BlockGrads& g) {
        sum += g.dq[0](0, 0) + g.dk[0](0, 0) + g.dv[0](0, 0);
      });
      sum += dX[0](0, 0);
      mine.forward += std::chrono::duration<double>(t1 - t0).count();
      mine.backward += seconds_since(t1);
    }
    const std::lock_guard<std::mutex> lock(mutex);
    total.forward += mine.forward;
    total.backward += mine.backward;
    checksum += sum;
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  if (!std::isfinite(checksum)) throw std::runtime_error("grad: a non-finite gradient");
  return total;
}

// What `grad` computes, as the measures that ask `rcsim run` for it: its setup is theirs.
const char* const kGradMeasures = "grad_x_norm,grad_wq_norm,grad_wk_norm,grad_wv_norm";

// The benchmark workload (see the header comment) with these sizes, plus `extra` keys.
Config workload(int n, int d, const std::string& mask, int trials, int layers, int threads,
                std::map<std::string, std::string> extra = {}) {
  extra.insert({{"model.tokens", std::to_string(n)},
                {"model.dim", std::to_string(d)},
                {"model.layers", std::to_string(layers)},
                {"mask.type", mask},
                {"norm.type", "layernorm"},
                {"run.trials", std::to_string(trials)},
                {"run.threads", std::to_string(threads)}});
  return make_config(extra);
}

// The BLAS/LAPACK shared objects mapped into this process (from /proc/self/maps).
std::string linear_algebra_libraries() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> found;
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find("blas") != std::string::npos || path.find("lapack") != std::string::npos) found.insert(path);
  }
  std::string out;
  for (const auto& f : found) out += (out.empty() ? "" : ",") + f;
  return out.empty() ? "none" : out;
}


// `profile`: the trial loop with every stage timed on its own (see the header comment).
std::string profile(const Config& c, const EngineSetup& s) {
  const int N = c.model.tokens, d = c.model.dim;
  const Normalization norm = Normalization::from_config(c);
  const LayerParams params = layer_params(c, &s.mask, &norm);
  const MaskRows rows = analyse_rows(s.mask);
  LogitsWorkspace lws;
  RowMajorMatrix S;
  RowVector buffer;
  Matrix XV(N, d), X_next(N, d), A, R;
  Eigen::HouseholderQR<Matrix> qr;
  Vector diag, super, work, sigma, h_coeffs, temp;
  std::map<std::string, std::vector<double>> t;  // seconds per stage, one sample per layer step
  std::map<std::string, double> count;
  MeasureOptions opt{c.metrics.rank_rtol, c.metrics.rank_atol, s.max_rank_input};
  volatile double sink = 0;
  const auto subnormals = [](const auto& m) {
    return static_cast<double>((m.array().abs() < std::numeric_limits<double>::min() && m.array() != 0.0).count());
  };
  const auto timed = [&](const char* name, auto&& f) {
    const auto t0 = Clock::now();
    f();
    t[name].push_back(seconds_since(t0));
  };
  int steps = 0;
  WeightSampler sampler(c, s.files);
  for (int trial = 0; trial < c.run.trials; ++trial) {
    RandomStream rng(c.run.seed, static_cast<std::uint64_t>(trial));
    Matrix X = initial_tokens(c, s.files, trial, rng);
    sampler.begin_trial(rng);
    for (int layer = 0; layer < c.model.layers; ++layer, ++steps) {
      // The measures of X (layer `layer`), stage by stage as singular_values does them.
      const bool tall = N >= d;
      const Eigen::Index k = std::min(N, d);
      double to_unit = 1;
      // The QR as singular_values runs it (panels of qr_block_size(k) columns), and for an A/B
      // in the same process as it ran before (Eigen's HouseholderQR: panels of 48).
      timed("m_qr_eigen48", [&] {
        int e = 0;
        std::frexp(X.cwiseAbs().maxCoeff(), &e);
        to_unit = std::ldexp(1.0, -e);
        if (tall) qr.compute(X * to_unit); else qr.compute(X.transpose() * to_unit);
        R = qr.matrixQR().topRows(k).triangularView<Eigen::Upper>();
      });
      timed("m_qr", [&] {
        int e = 0;
        std::frexp(X.cwiseAbs().maxCoeff(), &e);
        to_unit = std::ldexp(1.0, -e);
        if (tall) A = X * to_unit; else A = X.transpose() * to_unit;
        h_coeffs.resize(k);
        temp.resize(std::max<Eigen::Index>(N, d) + 1);
        Eigen::internal::householder_qr_inplace_blocked<Matrix, Vector>::run(A, h_coeffs, qr_block_size(k), temp.data());
        R = A.topRows(k).triangularView<Eigen::Upper>();
      });
      timed("m_bidiag", [&] {
        diag.resize(k);
        super.setZero(k);
        if (k <= 128) {  // as singular_values: unblocked in place up to k = 128, blocked above
          Eigen::internal::upperbidiagonalization_inplace_unblocked(R, diag.data(), super.data(), temp.data());
        } else {
          Eigen::internal::UpperBidiagonalization<Matrix> bd(R);
          diag = bd.bidiagonal().toDenseMatrix().diagonal();
          super.head(k - 1) = bd.bidiagonal().toDenseMatrix().diagonal<1>();
        }
      });
      timed("m_dqds", [&] {
        const int kk = static_cast<int>(k);
        work.resize(4 * kk);
        int info = 0;
        dlasq1_(&kk, diag.data(), super.data(), work.data(), &info);
      });
      sigma = diag / to_unit;
      timed("m_fro", [&] { sink = sink + X.norm(); });
      timed("m_mu", [&] { sink = sink + token_similarity(X); });
      timed("m_sigma_derived", [&] {
        sink = sink + numerical_rank(sigma, opt.rank_rtol, opt.rank_atol) + rank_one_residual(sigma) +
               stable_rank(sigma);
      });
      timed("m_cos", [&] { sink = sink + cos_abs_mean(X); });
      timed("measure_tokens", [&] { sink = sink + measure_tokens(X, opt, sigma).mu; });
      timed("nonfinite_check", [&] { sink = sink + all_finite(X); });
      count["sub_X"] += subnormals(X);
      // The layer.
      const LayerWeights* w = nullptr;
      timed("weights", [&] { w = &sampler.layer(layer, rng); });
      timed("logits", [&] {
        attention_logits_fast(X, w->q[0], w->k[0], params.d_qk, rows.lower_triangular, lws, S);
      });
      timed("softmax", [&] { sink = sink + softmax_rows(S, rows, buffer).mean_entropy; });
      count["sub_A"] += rows.lower_triangular ? subnormals(Matrix(S.triangularView<Eigen::Lower>()))
                                              : subnormals(S);
      timed("products", [&] {
        XV.noalias() = X * w->v[0];
        if (rows.lower_triangular)
          X_next.noalias() = S.triangularView<Eigen::Lower>() * XV;
        else
          X_next.noalias() = S * XV;
      });
      timed("norm", [&] { normalize_rows(X_next, norm); });
      X.swap(X_next);
    }
  }
  std::ostringstream out;
  if (std::getenv("RCSIM_PROFILE_ALL")) {  // every sample, for finding slow layers
    for (auto& [name, secs] : t) {
      out << "samples " << name;
      for (double x : secs) out << " " << x * 1e6;
      out << "\n";
    }
  }
  out << "profile";
  for (auto& [name, secs] : t) {  // medians: robust to the other processes of a busy machine
    std::nth_element(secs.begin(), secs.begin() + secs.size() / 2, secs.end());
    out << " " << name << "=" << secs[secs.size() / 2] * 1e6;
  }
  for (const auto& [name, n] : count) out << " " << name << "=" << n / steps;
  return out.str();
}

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
  rcsim::keep_freed_memory();  // as rcsim's main() does
  rcsim::fix_product_blocking();
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "quit") break;
    if (cmd == "peak") {
      int size = 0, threads = 0;
      in >> size >> threads;
      double secs = 0;
      const double g = peak(size, threads, secs);
      std::cout << "peak " << g << " " << secs << std::endl;
    } else if (cmd == "info") {
      std::string simd = Eigen::SimdInstructionSetsInUse();
      for (char& ch : simd) ch = ch == ' ' ? '+' : ch;
      std::cout << "info " << simd << " " << linear_algebra_libraries() << std::endl;
    } else if (cmd == "schedule") {
      std::string spec;
      int layers = 0;
      in >> spec >> layers;
      std::cout << "schedule";
      for (int t : parse_schedule(spec, layers)) std::cout << " " << t;
      std::cout << std::endl;
    } else if (cmd == "profile") {
      int n = 0, d = 0, trials = 0, layers = 0;
      std::string mask;
      in >> n >> d >> mask >> trials >> layers;
      const Config c = workload(n, d, mask, trials, layers, 1);
      std::cout << profile(c, prepare(c)) << std::endl;
    } else if (cmd == "grad") {
      int n = 0, d = 0, trials = 0, layers = 0, threads = 0;
      std::string mask;
      in >> n >> d >> mask >> trials >> layers >> threads;
      // Prepared as `rcsim run` prepares a run with these gradient measures (the reverse pass reads
      // the dense mask, which prepare builds only for a run that asks for a gradient measure: on
      // the cpu platform, N >= 512, a setup without them has none).
      const EngineSetup s = prepare(workload(n, d, mask, trials, layers, threads, {{"output.measures", kGradMeasures}}));
      const auto t0 = Clock::now();
      const PhaseSeconds p = run_gradients(s, threads);
      std::cout << "grad " << seconds_since(t0) << " " << p.forward << " " << p.backward << std::endl;
    } else if (cmd == "estimate") {
      int n = 0, d = 0, trials = 0, layers = 0, threads = 0;
      std::string mask;
      in >> n >> d >> mask >> trials >> layers >> threads;
      std::cout << "estimate " << run_memory_bytes(workload(n, d, mask, trials, layers, threads)) << std::endl;
    } else if (cmd == "run") {
      int n = 0, d = 0, measures = 0, trials = 0, layers = 0, threads = 0;
      std::string mask, schedule = "all", precision = "float64";
      in >> n >> d >> mask >> measures >> trials >> layers >> threads >> schedule >> precision;
      if (!measures && precision != "float64") {
        std::cout << "error run: MEASURES = 0 times the float64 trial loop only" << std::endl;
        continue;
      }
      const Config c =
          workload(n, d, mask, trials, layers, threads, {{"output.schedule", schedule}, {"run.precision", precision}});
      const EngineSetup s = prepare(c);
      const auto t0 = Clock::now();
      if (measures) {
        const RunResults r = run_simulation(s, threads);
        if (r.token.empty()) return 1;
      } else {
        run_without_measures(s, threads);
      }
      std::cout << "run " << seconds_since(t0) << std::endl;
    } else if (!cmd.empty()) {
      std::cout << "error unknown command " << cmd << std::endl;
    }
  }
  return 0;
}
