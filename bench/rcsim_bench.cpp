// Benchmark worker for bench/run_bench.py (not a unit test). Reads commands from stdin, one per
// line, and answers each with one line on stdout:
//   peak SIZE THREADS        -> "peak GFLOPS SECONDS": THREADS threads each multiply two SIZE x SIZE
//                               float64 matrices with Eigen (C = A B), timed together
//   run N D MASK MEASURES TRIALS LAYERS THREADS [SCHEDULE]
//                            -> "run SECONDS": the engine on the benchmark workload (LayerNorm,
//                               Gaussian inputs and fresh Gaussian weights per layer, d_k = d,
//                               one head). MEASURES = 1 runs rcsim's run_simulation (every measure
//                               at the layers of output.schedule = SCHEDULE, default all);
//                               MEASURES = 0 runs the same trial loop without measures (weights,
//                               attention layer, normalisation only).
//   schedule SPEC LAYERS     -> "schedule L0 L1 ...": the layers output.schedule = SPEC measures
//   info                     -> "info SIMD LIBS": Eigen's instruction sets in this build and the
//                               BLAS/LAPACK libraries mapped into the process (rcsim's LAPACK)
//   quit
#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/config.hpp"
#include "model/inputs.hpp"
#include "model/layer.hpp"
#include "model/normalization.hpp"
#include "core/random.hpp"
#include "run/simulation.hpp"

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

// The engine's trial loop without measures (see simulation.cpp: run_trial).
void run_without_measures(const EngineSetup& s, int threads) {
  const Config& c = s.config;
  std::atomic<int> next{0};
  auto worker = [&] {
    const int N = c.model.tokens, d = c.model.dim;
    const Normalization norm = Normalization::from_config(c);
    const LayerParams params = layer_params(c, &s.mask, &norm);
    LayerWorkspace ws(N, d, c.model.key_dim);
    Matrix X_next(N, d);
    WeightSampler sampler(c, s.files);
    for (int trial; (trial = next.fetch_add(1)) < c.run.trials;) {
      RandomStream rng(c.run.seed, static_cast<std::uint64_t>(trial));
      Matrix X = initial_tokens(c, s.files, trial, rng);
      sampler.begin_trial(rng);
      for (int t = 0; t < c.model.layers; ++t) {
        if (!X.allFinite()) break;
        attention_layer(X, sampler.layer(t, rng), params, ws, X_next);
        X.swap(X_next);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
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

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
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
    } else if (cmd == "run") {
      int n = 0, d = 0, measures = 0, trials = 0, layers = 0, threads = 0;
      std::string mask, schedule = "all";
      in >> n >> d >> mask >> measures >> trials >> layers >> threads >> schedule;
      const Config c = make_config({{"model.tokens", std::to_string(n)},
                                    {"model.dim", std::to_string(d)},
                                    {"model.layers", std::to_string(layers)},
                                    {"mask.type", mask},
                                    {"norm.type", "layernorm"},
                                    {"run.trials", std::to_string(trials)},
                                    {"run.threads", std::to_string(threads)},
                                    {"output.schedule", schedule}});
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
