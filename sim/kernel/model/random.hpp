// Deterministic random streams. Every trial's stream is a pure function of (seed, trial):
// results do not depend on thread count or order of execution, and (because the transforms from
// uniform bits are written here rather than taken from the standard library, whose
// normal_distribution differs between implementations) not on the standard library either.
#pragma once

#include <cstdint>

#include "kernel/support/types.hpp"

namespace rcsim {

// SplitMix64 finaliser (Steele, Lea, Flood 2014): decorrelates nearby seeds.
std::uint64_t splitmix64(std::uint64_t x);

// The independent streams of a trial: the third argument of RandomStream. One enumeration, so
// that a new use takes a number no other use has (the Hutchinson probes once took init.noise's 13
// and repeated its draws); tests/test_backward_engine.cpp checks that the values are distinct.
enum RandomStreamId : std::uint64_t {
  kWeightsStream = 0,        // X(0) and the weights of a trial (kernel/trial/trial.hpp)
  kPerturbationStream = 1,   // the perturbations of equilibria (app/equilibria.cpp)
  kLnGeometryStream = 3,     // ln-geometry's samples (geometry/layernorm_geometry.cpp)
  kGenerateStream = 7,       // the sampled token ids of rcsim generate (kernel/llama/generation.cpp)
  kDropoutStream = 11,       // the dropout masks (kernel/ops/dropout.hpp)
  kReadoutStream = 12,       // the readout R of the gradient measures (kernel/block/gradients.hpp)
  kInitNoiseStream = 13,     // init.noise (kernel/ops/noise.hpp)
  kDynamicsNoiseStream = 14, // dynamics.noise, the step after each block (kernel/ops/noise.hpp)
  kPowerStream = 15,         // the power iteration's start vectors (jacobian_log_spec2_full)
  kProbeStream = 16,         // the Hutchinson probes of jacobian_log_fro2
  kFullProbeStream = 17,     // the Hutchinson probes of jacobian_log_fro2_full
};

class RandomStream {
 public:
  // The stream of `trial` under `seed`. The `stream` argument separates independent uses
  // (RandomStreamId) without overlap in practice.
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
  // xoshiro256++ (Blackman and Vigna 2019): 64 random bits per call.
  std::uint64_t next() {
    const std::uint64_t result = rotl(state_[0] + state_[3], 23) + state_[0];
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  double normal_slow(std::uint64_t bits);  // wedges, tail and rejections
  std::uint64_t state_[4];
};

}  // namespace rcsim
