// Deterministic random streams. Every trial's stream is a pure function of (seed, trial):
// results do not depend on thread count or order of execution, and (because the transforms from
// uniform bits are written here rather than taken from the standard library, whose
// normal_distribution differs between implementations) not on the standard library either.
#pragma once

#include <cstdint>
#include <random>

#include "types.hpp"

namespace rcsim {

// SplitMix64 finaliser (Steele, Lea, Flood 2014): decorrelates nearby seeds.
std::uint64_t splitmix64(std::uint64_t x);

class RandomStream {
 public:
  // The stream of `trial` under `seed`. The `stream` argument separates independent uses
  // (e.g. 0 = inputs and weights of a run, 1 = perturbations) without overlap in practice.
  RandomStream(std::uint64_t seed, std::uint64_t trial, std::uint64_t stream = 0);

  // Uniform on the open interval (0, 1), 53 random bits.
  double uniform();
  // Standard normal N(0, 1) by the 256-layer ziggurat (Marsaglia and Tsang 2000; one 64-bit
  // draw per deviate in about 99% of cases; exact distribution, tail by Marsaglia's method).
  double normal();

  // Fill with i.i.d. N(0, std^2).
  void fill_normal(Eigen::Ref<Matrix> m, double std = 1.0);
  // Haar-distributed matrix with orthonormal columns (rows >= cols) or rows (rows < cols):
  // QR of a Gaussian matrix with the signs of diag(R) fixed (Mezzadri 2007).
  Matrix haar_orthogonal(Eigen::Index rows, Eigen::Index cols);

 private:
  double normal_slow(std::uint64_t bits);  // wedges, tail and rejections
  std::mt19937_64 engine_;
};

}  // namespace rcsim
