#include "kernel/ops/noise.hpp"

#include <cmath>

namespace rcsim {

void add_initial_noise(const ModelSpec& c, int trial, Matrix& X) {
  if (!(c.init.noise > 0.0)) return;
  RandomStream rng(c.run.seed, static_cast<std::uint64_t>(trial), kInitNoiseStream);
  Matrix G(X.rows(), X.cols());
  rng.fill_normal(G);
  X += c.init.noise * G;
  if (c.init.type == InitType::sphere || c.init.type == InitType::circle)
    for (Eigen::Index i = 0; i < X.rows(); ++i) X.row(i).normalize();
}

double dynamics_noise_scale(const ModelSpec& c) {
  if (!(c.dynamics_noise > 0.0)) return 0.0;
  const double dt = c.residual_alpha == 0.0 ? 1.0 : std::abs(c.residual_alpha);
  return c.dynamics_noise * std::sqrt(dt);
}

int apply_dynamics_noise(Matrix& X, double scale, RandomStream& rng, const Normalization& norm, Matrix* before) {
  Matrix G(X.rows(), X.cols());
  rng.fill_normal(G);
  X += scale * G;
  if (before) *before = X;
  return normalize_rows(X, norm);
}

}  // namespace rcsim
