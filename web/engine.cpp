// The C interface of rcsim's engine for the browser (WebAssembly, built by scripts/build-web.sh
// from web/CMakeLists.txt against the kernel and geometry libraries). Thin: every number comes
// from the kernel the CLI uses (a ModelSpec stepped by the kernel's Trial, the masks,
// token_similarity), so the page and `rcsim run` draw the same weights and tokens from the same
// streams and run the same blocks.
#include <emscripten/emscripten.h>

#include <cmath>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "kernel/model/random.hpp"
#include "geometry/brody.hpp"
#include "kernel/measures/metrics.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/trial/engine_setup.hpp"
#include "kernel/trial/trial.hpp"
#include "kernel/model/weights.hpp"

using namespace rcsim;

namespace {

// 0 none, 1 sphere, 2 layernorm, 3 projection, 4 rmsnorm (the order of NormType).
bool norm_type(int code, NormType& out) {
  if (code < 0 || code > 4) return false;
  out = static_cast<NormType>(code);
  return true;
}

// 0 complete, 1 causal, 2 sliding_window, 3 unidirectional_sliding_window (the order of MaskType).
bool mask_type(int code, MaskType& out) {
  if (code < 0 || code > 3) return false;
  out = static_cast<MaskType>(code);
  return true;
}

}  // namespace

extern "C" {

// The browser has no LAPACK. The run's preparation (prepare) reaches the measure registry and with
// it the singular values (kernel/measures/metrics.cpp), whose dqds solver is LAPACK's dlasq1: this
// one reports no convergence, which sends them to Eigen's BDCSVD, the kernel's own fallback. The
// page measures mu and mu_rel alone, so it never computes singular values.
void dlasq1_(const int*, double*, double*, double*, int* info) { *info = 1; }

// Figure 1 of docs/science/model-spec.md 5.5: N = d = 2, causal mask, W_Q = W_K = 0 (uniform attention over the
// allowed tokens), W_V given row-major in wv[4], X(0) = x0[4] (token 0 then token 1). Iterates
// `steps` layers with normalisation `norm` and writes X(0), ..., X(steps) row-major into
// out[(steps + 1) * 4]. Returns 0, or -1 for bad arguments.
EMSCRIPTEN_KEEPALIVE int rc_figure1(const double* wv, const double* x0, int norm, int steps, double* out) {
  NormType nt;
  if (steps < 0 || !norm_type(norm, nt)) return -1;
  try {
    const int n = 2, d = 2;
    LayerWeights w;
    w.q.push_back(Matrix::Zero(d, d));
    w.k.push_back(Matrix::Zero(d, d));
    Matrix v(d, d);
    v << wv[0], wv[1], wv[2], wv[3];
    w.v.push_back(v);
    const MaskMatrix mask = causal_mask(n);
    const Normalization normalization(nt, d);
    LayerParams p;
    p.mask = &mask;
    p.d_qk = d;
    p.norm = &normalization;
    LayerWorkspace ws(n, d, d);
    Matrix X(n, d), X_next(n, d);
    X << x0[0], x0[1], x0[2], x0[3];
    for (int t = 0; t <= steps; ++t) {
      for (int i = 0; i < 4; ++i) out[4 * t + i] = X(i / 2, i % 2);
      if (t == steps) break;
      attention_layer(X, w, p, ws, X_next);
      X.swap(X_next);
    }
    return 0;
  } catch (const std::exception&) {
    return -2;
  }
}

// Collapse explorer: `trials` trials of N tokens in R^d through `depth` layers of `heads` heads
// (W_Q, W_K: d x key_dim, W_V: d x d, Gaussian std 1/sqrt(d), drawn afresh per layer; logits
// scaled by 1 / sqrt(d_qk), a double: rcsim's model.key_dim and model.d_qk), mask `mask` (window
// `window` for the sliding windows), normalisation `norm`. Trial t uses RandomStream(seed, t):
// X(0) i.i.d. N(0, 1) first, then per layer W_Q of every head, W_K, W_V.
// Resumable, so that the page can show progress and stay responsive: rc_collapse_begin sets a run
// up (one per module instance; a new begin replaces it), each rc_collapse_advance(steps, out)
// computes up to `steps` more values, trial by trial and layer by layer in the order of a single
// pass, writing mu and mu_rel of X(0), ..., X(depth): out[(t * (depth + 1) + l) * 2 + {0, 1}]
// (the same `out` each call). The numbers do not depend on how the run is cut into calls.
namespace {

struct CollapseRun {
  EngineSetup setup;          // prepared as `rcsim run` prepares these keys, on the reference platform
  std::optional<Trial> step;  // the trial being run (kernel/trial/trial.hpp): X(layer) is its tokens
  int depth = 0, trials = 0;
  int trial = 0;  // the next value to write: X(step->layer()) of `trial`
};

std::unique_ptr<CollapseRun> collapse_run;

}  // namespace

// Returns 0, -1 for bad arguments, -2 if the engine threw.
EMSCRIPTEN_KEEPALIVE int rc_collapse_begin(int n, int d, int key_dim, double d_qk, int heads, int mask_code, int window,
                                           int norm, int depth, int trials, double seed) {
  collapse_run.reset();
  NormType nt;
  MaskType mt;
  auto run = std::make_unique<CollapseRun>();
  if (n < 1 || d < 1 || key_dim < 1 || !(d_qk > 0.0) || !std::isfinite(d_qk) || heads < 1 || depth < 0 ||
      trials < 1 || window < 0 || !norm_type(norm, nt) || !mask_type(mask_code, mt))
    return -1;
  try {
    // The model `rcsim run` builds from these keys (weights.*_std resolved to 1/sqrt(d)), prepared
    // by the kernel's prepare() as the command line and Python prepare theirs (no input arrays).
    ModelSpec spec;
    spec.mask.type = mt;
    spec.mask.window = window;
    spec.run.platform = Platform::reference;
    spec.run.threads = 1;
    spec.model.tokens = n;
    spec.model.dim = d;
    spec.model.layers = depth;
    spec.model.heads = heads;
    spec.model.key_dim = key_dim;
    spec.model.d_qk = d_qk;
    spec.norm.type = nt;
    spec.run.trials = trials;
    spec.run.seed = static_cast<std::uint64_t>(seed);
    const double std = 1.0 / std::sqrt(static_cast<double>(d));
    spec.weights.q.std = spec.weights.k.std = spec.weights.v.std = std;
    run->setup = prepare(spec, nullptr, InputArrays{});
    run->depth = depth;
    run->trials = trials;
    collapse_run = std::move(run);
    return 0;
  } catch (const std::exception&) {
    return -2;
  }
}

// Computes up to `steps` (>= 1) more values into `out`. Returns how many values of the
// trials * (depth + 1) are written in all (that total when the run is complete), -1 without a
// run, -2 if the engine threw (the run is then dropped).
EMSCRIPTEN_KEEPALIVE int rc_collapse_advance(int steps, double* out) {
  CollapseRun* r = collapse_run.get();
  if (!r || steps < 1) return -1;
  try {
    for (int s = 0; s < steps && r->trial < r->trials; ++s) {
      if (!r->step) r->step.emplace(r->setup, r->trial);  // X(0), as run_trial draws it
      const Matrix& X = r->step->tokens();
      const double mu = token_similarity(X);
      const double fro = X.norm();
      double* o = out + 2 * (static_cast<long>(r->trial) * (r->depth + 1) + r->step->layer());
      o[0] = mu;
      o[1] = fro > 0.0 ? mu / fro : 0.0;
      if (r->step->layer() == r->depth) {
        ++r->trial;
        r->step.reset();
        continue;
      }
      r->step->step();
    }
    return r->trial * (r->depth + 1) + (r->step ? r->step->layer() : 0);
  } catch (const std::exception&) {
    collapse_run.reset();
    return -2;
  }
}

// The whole run in one call (rc_collapse_begin, then rc_collapse_advance to the end).
// Returns 0, -1 for bad arguments, -2 if the engine threw.
EMSCRIPTEN_KEEPALIVE int rc_collapse(int n, int d, int key_dim, double d_qk, int heads, int mask_code, int window,
                                     int norm, int depth, int trials, double seed, double* out) {
  const int rc = rc_collapse_begin(n, d, key_dim, d_qk, heads, mask_code, window, norm, depth, trials, seed);
  if (rc != 0) return rc;
  const long total = static_cast<long>(trials) * (depth + 1);
  const int done = rc_collapse_advance(static_cast<int>(total), out);
  collapse_run.reset();
  return done == total ? 0 : (done < 0 ? done : -2);
}

// Brody's four-key example (sim/geometry/brody.hpp, as `rcsim brody-example`) for one magnitude m
// of key 3 and `angles` query angles (theta = 360 a / angles degrees, query norm s), normalisation
// `proj` (projection on/off) and `scale` (scaling on/off). Writes
//   out[0..7]   the keys' H coordinates after the normalisation, [4, 2] row-major;
//   out[8..11]  selectable per key (1 / 0), decided by rcsim's LP (GLPK);
//   out[12..15] the attention weights at angle index `angle`;
//   out[16..19] each key's largest weight over all `angles` query angles;
//   out[20..23] each normalised key's component along 1 / sqrt(3) (what the projection removes;
//               a query in H does not see it, so the other outputs ignore it).
// Returns 0, -1 for bad arguments, -2 if the engine threw.
EMSCRIPTEN_KEEPALIVE int rc_brody(double magnitude, int angles, double query_norm, int proj, int scale, int angle,
                                  double* out) {
  if (!(magnitude >= 0.0) || !std::isfinite(magnitude) || angles < 1 || !std::isfinite(query_norm) || angle < 0 ||
      angle >= angles || (proj != 0 && proj != 1) || (scale != 0 && scale != 1))
    return -1;
  try {
    BrodyExampleSpec spec;
    spec.magnitudes = {magnitude};
    spec.angles = angles;
    spec.query_norm = query_norm;
    const BrodyExample ex = brody_example(spec);
    const Matrix& keys = ex.plane_keys[proj][scale][0];
    // The normalisation brody_example applies (brody.cpp), here to read the keys' offset along 1.
    const NormType type =
        proj ? (scale ? NormType::layernorm : NormType::projection) : (scale ? NormType::rmsnorm : NormType::none);
    Matrix full = brody_example_keys(magnitude);
    normalize_rows(full, Normalization(type, 3, 0.0));
    const Vector along = full.rowwise().sum() / std::sqrt(3.0);
    const Matrix& weights = ex.weights[proj][scale][0];
    for (int j = 0; j < 4; ++j) {
      out[2 * j] = keys(j, 0);
      out[2 * j + 1] = keys(j, 1);
      out[8 + j] = ex.selectable[proj][scale][0][j];
      out[12 + j] = weights(angle, j);
      out[16 + j] = weights.col(j).maxCoeff();
      out[20 + j] = along(j);
    }
    return 0;
  } catch (const std::exception&) {
    return -2;
  }
}

}  // extern "C"
