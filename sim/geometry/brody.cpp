#include "geometry/brody.hpp"

#ifdef RCSIM_WITH_GLPK
#include <glpk.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "kernel/ops/attention.hpp"
#include "kernel/model/random.hpp"
#include "kernel/support/threads.hpp"
#include "geometry/selectability.hpp"
#include "kernel/trial/simulation.hpp"

namespace rcsim {

Matrix gaussian_keys(int n, int d, std::uint64_t seed, int draw) {
  const std::uint64_t stream = (static_cast<std::uint64_t>(n) << 32) | static_cast<std::uint64_t>(d);
  RandomStream rng(seed, static_cast<std::uint64_t>(draw), stream);
  Matrix K(n, d);
  // Row by row (key by key) so that key i does not depend on the storage order.
  for (int i = 0; i < n; ++i)
    for (int l = 0; l < d; ++l) K(i, l) = rng.normal();
  return K;
}

BrodyMap brody_map(const BrodyMapSpec& spec, const std::atomic<bool>* cancel,
                   const std::function<void(int, int)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  BrodyMap m;
  for (int n = spec.count_min; n <= spec.count_max; ++n) m.counts.push_back(n);
  for (int d = spec.dim_min; d <= spec.dim_max; ++d) m.dims.push_back(d);
  const Eigen::Index C = static_cast<Eigen::Index>(m.counts.size()), D = static_cast<Eigen::Index>(m.dims.size());
  for (std::size_t k = 0; k < spec.norms.size(); ++k) {
    m.unselectable_fraction.push_back(Matrix::Zero(D, C));
    m.any_unselectable_fraction.push_back(Matrix::Zero(D, C));
    m.max_unselectable.push_back(Matrix::Zero(D, C));
  }
  m.exact_unresolved.assign(spec.norms.size(), 0);
  const int total = static_cast<int>(C * D);
  // Cells are independent (each draw has its own stream), so any thread count gives the same map.
  // GLPK keeps its environment in thread-local storage: one problem object per thread is safe.
  std::atomic<int> next{0}, done{0};
  std::mutex progress_mutex;
  std::exception_ptr failure;
  auto worker = [&] {
    for (int cell = next++; cell < total; cell = next++) {
      try {
        if (cancel && cancel->load()) throw Interrupted();
        const Eigen::Index a = cell / C, b = cell % C;
        const int d = m.dims[static_cast<std::size_t>(a)], n = m.counts[static_cast<std::size_t>(b)];
        for (int t = 0; t < spec.draws; ++t) {
          const Matrix K0 = gaussian_keys(n, d, spec.seed, t);
          for (std::size_t k = 0; k < spec.norms.size(); ++k) {
            Matrix K = K0;
            normalize_rows(K, Normalization(spec.norms[k], d, spec.eps, {}, {}, spec.alpha));
            const KeySelectability sel = analyse_keys(K, spec.rtol, /*screen=*/true, spec.exact);
            const int u = sel.unselectable_count();
            if (sel.exact_unresolved > 0) {
              std::lock_guard<std::mutex> lock(progress_mutex);
              m.exact_unresolved[k] += sel.exact_unresolved;
            }
            m.unselectable_fraction[k](a, b) += static_cast<double>(u) / n;
            m.any_unselectable_fraction[k](a, b) += u > 0 ? 1.0 : 0.0;
            m.max_unselectable[k](a, b) = std::max(m.max_unselectable[k](a, b), static_cast<double>(u));
          }
        }
        for (std::size_t k = 0; k < spec.norms.size(); ++k) {
          m.unselectable_fraction[k](a, b) /= spec.draws;
          m.any_unselectable_fraction[k](a, b) /= spec.draws;
        }
        const int finished = ++done;
        if (progress) {
          std::lock_guard<std::mutex> lock(progress_mutex);
          progress(finished, total);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        if (!failure) failure = std::current_exception();
        next = total;  // stop every worker
      }
    }
  };
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max(1, std::min(spec.threads > 0 ? spec.threads : static_cast<int>(hw), total));
  // A thread the system refuses: one error naming map.threads, never std::terminate.
  const std::thread::id main_thread = std::this_thread::get_id();
  run_workers(
      threads - 1, true,
      [&worker, main_thread] {
        worker();
#ifdef RCSIM_WITH_GLPK
        if (std::this_thread::get_id() != main_thread) glp_free_env();  // GLPK's environment is per thread (LeakSanitizer)
#else
        (void)main_thread;
#endif
      },
      [&] { next = total; }, "map.threads", threads);
  if (failure) std::rethrow_exception(failure);
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return m;
}

namespace {
constexpr double kPi = 3.14159265358979323846;
// Orthonormal basis of the plane orthogonal to (1, 1, 1).
Vector plane_e1() { return (Vector(3) << 1.0, -1.0, 0.0).finished() / std::sqrt(2.0); }
Vector plane_e2() { return (Vector(3) << 1.0, 1.0, -2.0).finished() / std::sqrt(6.0); }
}  // namespace

Matrix brody_example_keys(double magnitude) {
  const double phi[4] = {20.0, 75.0, 115.0, 230.0};
  const double r[4] = {1.0, 1.0, magnitude, 1.0};
  const double c[4] = {0.6, -0.4, 0.3, -0.7};
  const Vector e1 = plane_e1(), e2 = plane_e2();
  Matrix K(4, 3);
  for (int j = 0; j < 4; ++j) {
    const double p = phi[j] * kPi / 180.0;
    K.row(j) = (r[j] * (std::cos(p) * e1 + std::sin(p) * e2)).transpose() + RowVector::Constant(3, c[j]);
  }
  return K;
}

BrodyExample brody_example(const BrodyExampleSpec& spec) {
  BrodyExample ex;
  const Vector e1 = plane_e1(), e2 = plane_e2();
  Matrix Q(spec.angles, 3);  // queries as rows
  for (int a = 0; a < spec.angles; ++a) {
    const double deg = 360.0 * a / spec.angles;
    ex.theta_degrees.push_back(deg);
    const double th = deg * kPi / 180.0;
    Q.row(a) = spec.query_norm * (std::cos(th) * e1 + std::sin(th) * e2).transpose();
  }
  ex.base_keys = brody_example_keys(1.0);
  Matrix basis(3, 2);
  basis << e1, e2;
  const std::size_t M = spec.magnitudes.size();
  ex.weights.assign(2, std::vector<std::vector<Matrix>>(2, std::vector<Matrix>(M)));
  ex.plane_keys = ex.weights;
  ex.selectable.assign(
      2, std::vector<std::vector<std::vector<std::uint8_t>>>(2, std::vector<std::vector<std::uint8_t>>(M)));
  for (int proj = 0; proj < 2; ++proj) {
    for (int scale = 0; scale < 2; ++scale) {
      const NormType type =
          proj ? (scale ? NormType::layernorm : NormType::projection) : (scale ? NormType::rmsnorm : NormType::none);
      const Normalization norm(type, 3, 0.0);
      for (std::size_t k = 0; k < M; ++k) {
        Matrix K = brody_example_keys(spec.magnitudes[k]);
        normalize_rows(K, norm);
        Matrix W = Q * K.transpose();  // scores [A, 4]
        masked_softmax(W, MaskMatrix::Ones(W.rows(), W.cols()));
        ex.weights[proj][scale][k] = W;
        ex.plane_keys[proj][scale][k] = K * basis;
        ex.selectable[proj][scale][k] = analyse_keys(ex.plane_keys[proj][scale][k]).selectable;
      }
    }
  }
  return ex;
}

}  // namespace rcsim
