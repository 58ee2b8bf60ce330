// The image of LayerNorm (Riechers 2024; docs/science/model-spec.md 5.7). For gain g (all g_n != 0), bias b:
//   LayerNorm(a) - b = sqrt(d) G P a / sqrt(||P a||^2 + d eps),   G = diag(g), P = I - 11^T/d.
// With u = sqrt(d) P a / sqrt(||P a||^2 + d eps) (in the plane 1^T u = 0, ||u|| < sqrt(d), and
// ||u|| = sqrt(d) for eps = 0), y = LayerNorm(a) - b = G u satisfies
//   alpha^T y = 0 with alpha_n = 1/g_n                      (the image plane, normal alpha),
//   y^T G^-2 y = ||u||^2 <= d                               (inside an ellipsoid).
// In the plane y = P2 y (P2 = I - alpha alpha^T / alpha^T alpha), so y^T M y <= d with
// M = P2 G^-2 P2. M alpha = 0 (one zero eigenvalue); on the plane M is positive definite, and its
// d - 1 eigenvectors there are the principal axes, with semi-axes sqrt(d / lambda).
// The normalised radius rho(y) = sqrt(y^T G^-2 y / d) = ||P a|| / sqrt(||P a||^2 + d eps) lies in
// [0, 1): 1 on the surface; small eps concentrates outputs near the surface.
#pragma once

#include <cstdint>

#include "kernel/support/types.hpp"

namespace rcsim {

struct LayerNormEllipsoid {
  int dim = 0;
  Vector alpha;                  // alpha_n = 1 / g_n
  Vector normal;                 // alpha / ||alpha||: unit normal of the image plane (through b)
  Vector eigenvalues;            // all d eigenvalues of M = P2 G^-2 P2, ascending (the first is ~0)
  Matrix axes;                   // d x (d - 1): unit principal axes, columns ordered by decreasing semi-axis
  Vector semi_axes;              // d - 1 lengths sqrt(d / lambda), descending
  Vector axis_eigenvalues;       // the d - 1 nonzero eigenvalues, in the order of `axes`
  double zero_eigenvalue = 0.0;  // the eigenvalue along alpha (0 up to rounding)
};

// Throws UsageError for d < 2 ("gain: needs d >= 2") or a zero or non-finite gain.
LayerNormEllipsoid layernorm_ellipsoid(const Eigen::Ref<const RowVector>& gain);

// Normalised radius sqrt((y - b)^T G^-2 (y - b) / d) of every row y of Y (n x d).
Vector normalised_radius(const Eigen::Ref<const Matrix>& Y, const Eigen::Ref<const RowVector>& gain,
                         const Eigen::Ref<const RowVector>& bias);

// |normal . (y - b)| of every row: the distance of a LayerNorm output from the image plane.
Vector plane_distance(const Eigen::Ref<const Matrix>& Y, const LayerNormEllipsoid& e,
                      const Eigen::Ref<const RowVector>& bias);

// Sampling check: LayerNorm (gain, bias, eps) of `samples` inputs a ~ N(0, input_std^2 I),
// drawn from RandomStream(seed, 0, stream). Returns the outputs' normalised radii and distances
// from the image plane, and the first `store` outputs themselves.
struct LayerNormSample {
  double eps = 0.0;
  Vector radius;          // [samples] normalised radius in [0, 1]
  Vector plane_distance;  // [samples] |normal . (y - b)|
  Matrix points;          // [min(store, samples), d] LayerNorm outputs
};
LayerNormSample sample_layernorm(const LayerNormEllipsoid& e, const Eigen::Ref<const RowVector>& gain,
                                 const Eigen::Ref<const RowVector>& bias, double eps, int samples, std::uint64_t seed,
                                 double input_std, int store);

}  // namespace rcsim
