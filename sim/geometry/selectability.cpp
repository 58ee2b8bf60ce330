#include "geometry/selectability.hpp"

#ifdef RCSIM_WITH_GLPK
#include <glpk.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "kernel/support/errors.hpp"

namespace rcsim {

namespace {

// Built without GLPK (-DRCSIM_GLPK=OFF, or libglpk-dev missing): the LP entry points refuse.
[[maybe_unused]] constexpr const char* kNoGlpk =
    "this rcsim was built without GLPK (GPL-3.0): the selectability LP needs it; install libglpk-dev and rebuild "
    "with -DRCSIM_GLPK=ON";

void require_glpk() {
#ifndef RCSIM_WITH_GLPK
  throw RuntimeError(kNoGlpk);
#endif
}

#ifdef RCSIM_WITH_GLPK
struct ProbDeleter {
  void operator()(glp_prob* p) const { glp_delete_prob(p); }
};
#endif

struct KeyResult {
  bool selectable = true;
  double margin = std::numeric_limits<double>::infinity();
  double certificate = std::numeric_limits<double>::infinity();
  double scale = 0.0;
  Vector q;
  bool exact_unresolved = false;
};

// Magnitudes GLPK solves unscaled (below and above, it aborts the process: see scale_exponent).
constexpr double kScaleAbove = 1e100, kScaleBelow = 1e-100;
int magnitude_exponent(double m) { return m == 0.0 || (m >= kScaleBelow && m <= kScaleAbove) ? 0 : std::ilogb(m); }

// The coefficients of key i's LP: the differences D, scaled by 2^-e (exact; e = 0 unless the scale
// max_j ||D_j||_1 lies outside [kScaleBelow, kScaleAbove]), with every entry below kNegligible
// times the scale set to zero. GLPK's scaling aborts the process ("glp_set_rii: invalid scale
// factor") when the coefficients of one LP span some 300 decades, which scaling all keys by one
// factor does not prevent: entries from 1e300 to 1e-300, or one key of norm 1e165 beside unit keys.
// Zeroing moves the optimum t by at most d * kNegligible * scale (|q_l| <= 1), some 140 decades
// below the tolerance rtol * scale of the decisions; certificates are always measured on D itself.
#ifdef RCSIM_WITH_GLPK
constexpr double kNegligible = 0x1p-500;  // about 3e-151
Matrix lp_coefficients(const Matrix& D, double scale, int e) {
  const double floor = kNegligible * scale;
  return D.unaryExpr([e, floor](double x) { return std::abs(x) < floor ? 0.0 : std::ldexp(x, -e); });
}

// The LP of one key: maximise t subject to D_j.q - t >= 0 for every row D_j, -1 <= q_l <= 1.
void load_key_lp(glp_prob* P, const Matrix& D) {
  glp_set_obj_dir(P, GLP_MAX);
  const int rows = static_cast<int>(D.rows()), cols = static_cast<int>(D.cols() + 1);
  glp_add_rows(P, rows);
  glp_add_cols(P, cols);
  for (int j = 1; j <= rows; ++j) glp_set_row_bnds(P, j, GLP_LO, 0.0, 0.0);  // D_j.q - t >= 0
  for (int l = 1; l <= cols - 1; ++l) glp_set_col_bnds(P, l, GLP_DB, -1.0, 1.0);
  glp_set_col_bnds(P, cols, GLP_FR, 0.0, 0.0);  // t free (t* >= 0 since q = 0 is feasible)
  glp_set_obj_coef(P, cols, 1.0);

  // Dense constraint matrix, 1-based triplets as GLPK wants them.
  const std::size_t ne = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  std::vector<int> ia(ne + 1), ja(ne + 1);
  std::vector<double> ar(ne + 1);
  std::size_t k = 1;
  for (int j = 0; j < rows; ++j) {
    for (int l = 0; l < cols - 1; ++l, ++k) {
      ia[k] = j + 1;
      ja[k] = l + 1;
      ar[k] = D(j, l);
    }
    ia[k] = j + 1;
    ja[k] = cols;
    ar[k] = -1.0;
    ++k;
  }
  glp_load_matrix(P, static_cast<int>(ne), ia.data(), ja.data(), ar.data());
}
#endif

KeyResult solve_key(const Eigen::Ref<const Matrix>& K, Eigen::Index i, double rtol, bool screen, bool exact) {
  const Eigen::Index n = K.rows(), d = K.cols();
  KeyResult r;
  r.q = Vector::Zero(d);
  if (n == 1) return r;  // no competitor: selectable by any query

  // Differences D_j = k_i - k_j for j != i (rows), and the scale max_j ||D_j||_1.
  Matrix D(n - 1, d);
  for (Eigen::Index j = 0, row = 0; j < n; ++j)
    if (j != i) D.row(row++) = K.row(i) - K.row(j);
  r.scale = D.rowwise().lpNorm<1>().maxCoeff();

  if (screen) {
    const double big = K.row(i).lpNorm<Eigen::Infinity>();
    if (big > 0) {
      const Vector q = K.row(i).transpose() / big;
      const double cert = (D * q).minCoeff();
      if (cert > rtol * r.scale) {
        r.q = q;
        r.certificate = cert;
        r.margin = std::numeric_limits<double>::quiet_NaN();
        return r;
      }
    }
  }

#ifndef RCSIM_WITH_GLPK
  (void)exact;
  throw RuntimeError(kNoGlpk);
#else
  glp_term_out(GLP_OFF);
  std::unique_ptr<glp_prob, ProbDeleter> lp(glp_create_prob());
  glp_prob* P = lp.get();
  const int e = magnitude_exponent(r.scale);  // the LP's optimum is t* / 2^e
  load_key_lp(P, lp_coefficients(D, r.scale, e));
  const int cols = static_cast<int>(d + 1);

  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  parm.presolve = GLP_OFF;
  glp_scale_prob(P, GLP_SF_AUTO);
  int ret = glp_simplex(P, &parm);
  if (ret != 0 || glp_get_status(P) != GLP_OPT) {
    // One retry from a fresh basis with the exact (rational) simplex.
    glp_std_basis(P);
    ret = glp_exact(P, &parm);
  }
  if (ret != 0 || glp_get_status(P) != GLP_OPT)
    throw RuntimeError("GLPK could not solve the selectability LP of key " + std::to_string(i) + " (return code " +
                       std::to_string(ret) + ", status " + std::to_string(glp_get_status(P)) + ")");

  auto read_solution = [&] {
    r.margin = std::ldexp(glp_get_obj_val(P), e);
    for (int l = 0; l < cols - 1; ++l) r.q(l) = std::clamp(glp_get_col_prim(P, l + 1), -1.0, 1.0);
    r.certificate = (D * r.q).minCoeff();
  };
  read_solution();
  r.selectable = r.certificate > rtol * r.scale;
  if (exact && !r.selectable) {
    // Re-solve in exact rational arithmetic from the floating-point basis: the optimum is then
    // the exact L1 distance for the given (double) keys; the same tolerance rtol * scale_i keeps
    // keys that stick out by rounding errors only (e.g. LayerNorm images that differ in the last
    // bit) on the hull. The exact simplex can be very slow on rare inputs (rationals with huge
    // denominators): it gets kExactTimeLimitMs; if it does not finish, the floating-point
    // decision stands and the key is counted in exact_unresolved.
    glp_smcp xparm = parm;
    xparm.tm_lim = kExactTimeLimitMs;
    ret = glp_exact(P, &xparm);
    if (ret == 0 && glp_get_status(P) == GLP_OPT) {
      read_solution();
      r.selectable = r.margin > rtol * r.scale;
    } else {
      r.exact_unresolved = true;
    }
  }
  return r;
#endif
}

void check_finite(const Eigen::Ref<const Matrix>& K) {
  if (!K.allFinite()) throw UsageError("keys: every entry must be finite (found NaN or infinity)");
}

// Selectability is invariant under scaling all keys by c > 0 (the hull is scaled; margin,
// certificate and scale scale by c). GLPK aborts the process on coefficients beyond about 1e155
// or below about 1e-165 (its scaling and tolerances overflow / underflow), so keys whose largest
// magnitude lies outside [kScaleBelow, kScaleAbove] are solved scaled by a power of two, 2^-e,
// (exact) and the lengths are scaled back. Keys within the range are solved unscaled (unchanged
// results). Returns e (0 = unscaled).
int scale_exponent(const Eigen::Ref<const Matrix>& K) { return magnitude_exponent(K.size() ? K.cwiseAbs().maxCoeff() : 0.0); }

// Key i of `keys` (scaled by 2^-e when e != 0: `scaled` holds them) with lengths in the units
// of `keys`.
KeyResult solve_scaled(const Eigen::Ref<const Matrix>& keys, const Matrix& scaled, int e, Eigen::Index i, double rtol,
                       bool screen, bool exact) {
  if (e == 0) return solve_key(keys, i, rtol, screen, exact);
  KeyResult r = solve_key(scaled, i, rtol, screen, exact);
  r.margin = std::ldexp(r.margin, e);
  r.certificate = std::ldexp(r.certificate, e);
  r.scale = std::ldexp(r.scale, e);
  return r;
}

Matrix scaled_keys(const Eigen::Ref<const Matrix>& keys, int e) {
  if (e == 0) return Matrix();
  return keys.unaryExpr([e](double x) { return std::ldexp(x, -e); });
}

}  // namespace

int KeySelectability::unselectable_count() const {
  int c = 0;
  for (auto s : selectable) c += s ? 0 : 1;
  return c;
}

double KeySelectability::unselectable_fraction() const {
  return selectable.empty() ? 0.0 : static_cast<double>(unselectable_count()) / static_cast<double>(selectable.size());
}

bool key_is_selectable(const Eigen::Ref<const Matrix>& keys, Eigen::Index i, double rtol) {
  require_glpk();
  check_finite(keys);
  const int e = scale_exponent(keys);
  return solve_scaled(keys, scaled_keys(keys, e), e, i, rtol, false, false).selectable;
}

KeySelectability analyse_keys(const Eigen::Ref<const Matrix>& keys, double rtol, bool screen, bool exact) {
  require_glpk();
  check_finite(keys);
  const Eigen::Index n = keys.rows(), d = keys.cols();
  KeySelectability out;
  out.selectable.resize(static_cast<std::size_t>(n));
  out.margin.resize(n);
  out.certificate.resize(n);
  out.scale.resize(n);
  out.query.resize(n, d);
  const int e = scale_exponent(keys);
  const Matrix scaled = scaled_keys(keys, e);
  for (Eigen::Index i = 0; i < n; ++i) {
    const KeyResult r = solve_scaled(keys, scaled, e, i, rtol, screen, exact);
    out.selectable[static_cast<std::size_t>(i)] = r.selectable ? 1 : 0;
    out.margin(i) = r.margin;
    out.certificate(i) = r.certificate;
    out.scale(i) = r.scale;
    out.query.row(i) = r.q.transpose();
    out.exact_unresolved += r.exact_unresolved ? 1 : 0;
  }
  return out;
}

}  // namespace rcsim
