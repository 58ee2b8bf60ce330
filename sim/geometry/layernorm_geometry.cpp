#include "geometry/layernorm_geometry.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "kernel/support/errors.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/model/random.hpp"

namespace rcsim {

LayerNormEllipsoid layernorm_ellipsoid(const Eigen::Ref<const RowVector>& gain) {
  const Eigen::Index d = gain.size();
  if (d < 2)
    throw UsageError("norm.gain: the LayerNorm ellipsoid needs dimension d >= 2 (got d = " + std::to_string(d) +
                     "; for d = 1 LayerNorm maps every input to the bias)");
  for (Eigen::Index n = 0; n < d; ++n)
    if (!(std::isfinite(gain(n)) && gain(n) != 0.0))
      throw UsageError("norm.gain: every gain must be finite and nonzero (alpha_n = 1/g_n); entry " +
                       std::to_string(n) + " is " + std::to_string(gain(n)));

  LayerNormEllipsoid e;
  e.dim = static_cast<int>(d);
  e.alpha = gain.transpose().cwiseInverse();
  e.normal = e.alpha.normalized();
  const Matrix P2 = Matrix::Identity(d, d) - e.normal * e.normal.transpose();
  const Vector inv_g2 = gain.transpose().array().square().inverse().matrix();
  Matrix M = P2 * inv_g2.asDiagonal() * P2;
  M = 0.5 * (M + M.transpose());  // exactly symmetric
  const Eigen::SelfAdjointEigenSolver<Matrix> es(M);
  if (es.info() != Eigen::Success) throw RuntimeError("ln-geometry: eigendecomposition of P2 G^-2 P2 failed");
  e.eigenvalues = es.eigenvalues();

  // The zero eigenvalue belongs to the eigenvector along alpha; pick it by direction, not by
  // size, then order the other d - 1 by increasing eigenvalue = decreasing semi-axis.
  Eigen::Index zero = 0;
  (es.eigenvectors().transpose() * e.normal).cwiseAbs().maxCoeff(&zero);
  e.zero_eigenvalue = e.eigenvalues(zero);
  std::vector<Eigen::Index> order;
  for (Eigen::Index k = 0; k < d; ++k)
    if (k != zero) order.push_back(k);
  e.axes.resize(d, d - 1);
  e.semi_axes.resize(d - 1);
  e.axis_eigenvalues.resize(d - 1);
  for (Eigen::Index c = 0; c < d - 1; ++c) {
    const Eigen::Index k = order[static_cast<std::size_t>(c)];
    Vector v = es.eigenvectors().col(k);
    // Sign convention: the largest-magnitude component positive (deterministic output).
    Eigen::Index big = 0;
    v.cwiseAbs().maxCoeff(&big);
    if (v(big) < 0) v = -v;
    e.axes.col(c) = v;
    e.axis_eigenvalues(c) = e.eigenvalues(k);
    e.semi_axes(c) = std::sqrt(static_cast<double>(d) / e.eigenvalues(k));
  }
  return e;
}

Vector normalised_radius(const Eigen::Ref<const Matrix>& Y, const Eigen::Ref<const RowVector>& gain,
                         const Eigen::Ref<const RowVector>& bias) {
  const double d = static_cast<double>(Y.cols());
  const Matrix U = (Y.rowwise() - bias).array().rowwise() / gain.array();
  return (U.rowwise().squaredNorm() / d).cwiseSqrt();
}

Vector plane_distance(const Eigen::Ref<const Matrix>& Y, const LayerNormEllipsoid& e,
                      const Eigen::Ref<const RowVector>& bias) {
  return ((Y.rowwise() - bias) * e.normal).cwiseAbs();
}

LayerNormSample sample_layernorm(const LayerNormEllipsoid& e, const Eigen::Ref<const RowVector>& gain,
                                 const Eigen::Ref<const RowVector>& bias, double eps, int samples, std::uint64_t seed,
                                 double input_std, int store) {
  const int d = e.dim;
  RandomStream rng(seed, 0, kLnGeometryStream);
  Matrix Y(samples, d);
  rng.fill_normal(Y, input_std);
  Normalization norm(NormType::layernorm, d, eps);
  norm.gain = gain;
  norm.bias = bias;
  normalize_rows(Y, norm);
  LayerNormSample s;
  s.eps = eps;
  s.radius = normalised_radius(Y, gain, bias);
  s.plane_distance = plane_distance(Y, e, bias);
  s.points = Y.topRows(std::min(store, samples));
  return s;
}

}  // namespace rcsim
