// The experiments of Brody, Alon and Yahav (2023) on selectable keys: random key sets, the
// (n, d) heat map of unselectable keys, and the four-key attention example (seed 000).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernel/ops/normalization.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// Draw `draw` of n i.i.d. N(0, 1) keys in R^d under `seed`: a pure function of (seed, n, d, draw)
// (RandomStream(seed, draw, stream = 2^32 n + d)), so `rcsim keys` reproduces any cell and
// draw of the heat map.
Matrix gaussian_keys(int n, int d, std::uint64_t seed, int draw);

struct BrodyMapSpec {
  int count_min = 3, count_max = 60;  // n
  int dim_min = 3, dim_max = 15;      // d
  int draws = 100;
  std::uint64_t seed = kDefaultSeed;
  std::vector<NormType> norms{NormType::none, NormType::layernorm};
  double eps = kDefaultNormEps;  // of layernorm / rmsnorm (gain 1, bias 0)
  double alpha = kDefaultNormAlpha;  // input scale a of dyt / derf (gain 1, bias 0)
  double rtol = 1e-9;  // selectability tolerance (selectability.hpp)
  bool exact = false;  // re-check unselectable keys with GLPK's exact simplex
  int threads = 1;     // worker threads over cells (0 = all cores); results do not depend on it
};

struct BrodyMap {
  std::vector<int> counts, dims;
  // Per norm: [dim, count] matrices (rows d, columns n).
  std::vector<Matrix> unselectable_fraction;      // mean over draws of (unselectable keys / n)
  std::vector<Matrix> any_unselectable_fraction;  // fraction of draws with >= 1 unselectable key
  std::vector<Matrix> max_unselectable;           // largest number of unselectable keys in a draw
  std::vector<long long> exact_unresolved;        // per norm: keys whose exact re-check timed out
  double seconds = 0.0;
};

// The heat map; every draw is used for every norm (a paired comparison). `cancel` is polled
// between cells. Progress callback (may be empty): called with (cells done, cells total).
BrodyMap brody_map(const BrodyMapSpec& spec, const std::atomic<bool>* cancel = nullptr,
                   const std::function<void(int, int)>& progress = {});

// The four-key example. Keys live in R^3; we draw them in the plane H orthogonal to 1 (basis
// e1 = (1, -1, 0)/sqrt 2, e2 = (1, 1, -2)/sqrt 6) plus an offset c_j along 1, so that the
// projection step has something to remove:
//   k_j = r_j (cos phi_j e1 + sin phi_j e2) + c_j 1,
//   phi = (20, 75, 115, 230) degrees, r = (1, 1, m, 1), c = (0.6, -0.4, 0.3, -0.7),
// key 3 (index 2) has the adjustable magnitude m. The query is q(theta) = s (cos theta e1 +
// sin theta e2) with s = query_norm; attention = softmax over the four scores q . LN(k_j), where
// LN is none, projection (k - mean k), scaling (sqrt(d) k / ||k||, rmsnorm with eps 0), or both
// (LayerNorm, eps 0). Selectability is decided for queries in H, i.e. on the H coordinates of
// the normalised keys (a query in H sees k only through its H component).
struct BrodyExampleSpec {
  std::vector<double> magnitudes{1.0, 2.0, 3.0, 4.0};
  int angles = 360;         // theta = 0, 360/angles, ... degrees
  double query_norm = 4.0;  // s
};

struct BrodyExample {
  std::vector<double> theta_degrees;  // [A]
  Matrix base_keys;                   // [4, 3] for m = 1
  // Indexed [projection][scaling][magnitude]: weights [A, 4], H coordinates [4, 2], selectable [4].
  std::vector<std::vector<std::vector<Matrix>>> weights;
  std::vector<std::vector<std::vector<Matrix>>> plane_keys;
  std::vector<std::vector<std::vector<std::vector<std::uint8_t>>>> selectable;
};

Matrix brody_example_keys(double magnitude);  // [4, 3]
BrodyExample brody_example(const BrodyExampleSpec& spec);

}  // namespace rcsim
