// Selectable keys (Brody et al. 2023; docs/science/model-spec.md 5.6). A key k_i is selectable iff some query q
// gives it the strictly largest score: q.(k_i - k_j) > 0 for every j != i. Equivalently k_i is
// not in the convex hull of the other keys. Decided per key by a linear programme (GLPK):
//
//     maximise t  over (q, t)  subject to  q.(k_i - k_j) >= t  (j != i),  -1 <= q_l <= 1.
//
// By LP duality the optimum t* is the L1 distance of k_i from the convex hull of the others
// (min over convex weights lambda of ||k_i - sum_j lambda_j k_j||_1), so t* = 0 exactly when k_i
// is unselectable and t* > 0 measures by how much a selectable key sticks out.
//
// Decision with a checked certificate: the LP's query q (clipped to the box) is re-evaluated in
// double precision, certificate = min_j q.(k_i - k_j). The key is selectable iff
//     certificate > rtol * scale_i,   scale_i = max_j ||k_i - k_j||_1   (default rtol = 1e-9),
// so "selectable" always comes with a query that verifiably selects it. Consequences, by design:
//   - duplicate keys (k_i = k_j) are unselectable: neither can beat the other strictly;
//   - a key on the boundary of the hull of the others (e.g. the midpoint of an edge, the middle
//     of three collinear keys) is unselectable;
//   - a key whose L1 distance from the hull of the others is below about 1e-9 scale_i, or below
//     what GLPK's floating-point simplex resolves (its tolerances are 1e-7 relative), is treated
//     as on the hull: unselectable, unless `exact` is set (see analyse_keys);
//   - fewer keys than d + 1 is no special case (affinely independent keys are all selectable);
//   - a single key (n = 1) is selectable (no competitor; any query), with margin = +inf;
//   - keys whose largest magnitude is above 1e100 or below 1e-100 are solved scaled by a power
//     of two (exact; the decision is scale invariant) because GLPK aborts the process on
//     coefficients beyond about 1e155 or below 1e-165; margins are reported in the keys' units;
//   - each key's LP is scaled alone likewise (by its scale_i) and differences below 2^-500
//     scale_i are zero in the LP (GLPK aborts on one LP spanning some 300 decades: 1e300 beside
//     1e-300); this moves the margin by at most d 2^-500 scale_i, far below the tolerance.
#pragma once

#include <cstdint>
#include <vector>

#include "kernel/support/types.hpp"

namespace rcsim {

struct KeySelectability {
  std::vector<std::uint8_t> selectable;  // 1 = selectable, per key
  Vector margin;                         // LP optimum t* (L1 distance from the hull of the others)
  Vector certificate;                    // min_j q.(k_i - k_j) for the LP's query q, in double
  Vector scale;                          // max_j ||k_i - k_j||_1
  Matrix query;                          // [n, d]: the LP's query per key (|q_l| <= 1)
  int exact_unresolved = 0;              // keys whose exact re-check hit the time limit

  int unselectable_count() const;
  double unselectable_fraction() const;  // 0 for n = 0
};

constexpr double kSelectabilityRtol = 1e-9;
constexpr int kExactTimeLimitMs = 2000;  // per exact re-check; then the floating decision stands

// Decide every key (rows of `keys`, n x d). Throws UsageError for non-finite entries and
// RuntimeError if GLPK fails to solve an LP (never observed: the LP is feasible and bounded).
// With `screen`, the query q = k_i / ||k_i||_inf is tried first: if it passes the same test
// (certificate > rtol * scale_i) the key is selectable without an LP and its margin is reported
// as NaN (not computed). Screening never changes a decision that the LP would make "selectable"
// into "unselectable"; it only skips LPs (every key on a sphere passes it). Off by default.
// With `exact`, every key the floating-point test calls unselectable is re-solved by GLPK's
// exact simplex (rational arithmetic, glp_exact, warm-started from the floating-point basis):
// the margin is then the exact optimum for the given double-precision keys and the key is
// selectable iff margin > rtol * scale_i (so that rounding-level protrusions, ~1e-16 scale_i,
// still count as on the hull). This resolves keys that stick out of the
// hull of the others by less than GLPK's floating-point tolerance (e.g. two keys 3e-5 rad apart
// on a circle: margin ~2e-7). Costly when many keys are unselectable (raw Gaussian keys), and
// on rare inputs the rational simplex is very slow: each re-check gets kExactTimeLimitMs, after
// which the floating-point decision stands and the key is counted in exact_unresolved.
KeySelectability analyse_keys(const Eigen::Ref<const Matrix>& keys, double rtol = kSelectabilityRtol,
                              bool screen = false, bool exact = false);

// Selectability of key i alone (used by analyse_keys).
bool key_is_selectable(const Eigen::Ref<const Matrix>& keys, Eigen::Index i, double rtol = kSelectabilityRtol);

}  // namespace rcsim
