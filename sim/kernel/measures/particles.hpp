// Transformers as interacting particles (docs/science/particles.md; SCIENCE.md section 6):
// hardmax attention and the measures of the particle literature that are not cluster counts.
#pragma once

#include "kernel/ops/softmax.hpp"  // hardmax_weights
#include "kernel/support/types.hpp"

namespace rcsim {

// Interaction energy, the form rcsim stores (measure `energy`):
//   E = (1 / (2 beta N^2)) sum_{i,j} exp(beta (<x_i, x_j> - 1)) = exp(-beta) E_beta,
// E_beta = (1 / (2 beta N^2)) sum_{i,j} exp(beta <x_i, x_j>) of Geshkovski et al. The shift by 1
// (= |x|^2 on the unit sphere) keeps it finite for large beta; for unit tokens E lies in
// (0, 1 / (2 beta)], 1 / (2 beta) iff all tokens coincide. Summed in a fixed order (deterministic).
double interaction_energy(const Eigen::Ref<const Matrix>& X, double beta);

// Leading Fourier mode of the token angles on the circle (d = 2; Bruno, Pasqualotto, Agazzi's
// k-periodic states): max over k = 1..max_k of | (1/N) sum_j exp(i k theta_j) |, theta_j = atan2(x_j2, x_j1).
// NaN for d != 2. A zero token has angle 0.
double fourier_mode(const Eigen::Ref<const Matrix>& X, int max_k = 4);
// The k in 1..max_k that attains fourier_mode (the smallest k within 1e-12 of it): the periodicity of a k-periodic
// state. NaN for d != 2.
double fourier_k(const Eigen::Ref<const Matrix>& X, int max_k = 4);
// The range of the measure fourier_k: k = 1..8 (Bruno et al.'s k_max is 5 at beta = 12; fourier_mode keeps 1..4).
constexpr int kFourierKmax = 8;

}  // namespace rcsim
