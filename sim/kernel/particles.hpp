// Transformers as interacting particles (docs/science/particles.md; SCIENCE.md section 6):
// hardmax attention and the measures of the particle literature that are not cluster counts.
#pragma once

#include "kernel/types.hpp"

namespace rcsim {

// Relative tolerance of hardmax ties: j is a maximiser of row i when
//   S_ij >= m_i - tol max(|m_i|, 1),  m_i = max over the allowed j of S_ij,
// tol = 1e-12 in double and 1e-5 in float (a few hundred ulps of the row maximum).
double hardmax_tie_tolerance(bool single);

// Hardmax attention (beta -> infinity; Alcalde, Geshkovski, Ruiz-Balet), in place on the logits:
//   A_ij = 1 / |S_i| for j in S_i, the maximisers of S_ij over the allowed j of row i, 0 elsewhere
// (masked entries exactly 0). Every row sums to 1 (each row has its self-loop).
void hardmax_weights(Eigen::Ref<Matrix> S, const MaskMatrix& mask);
void hardmax_weights(Eigen::Ref<MatrixF> S, const MaskMatrix& mask);  // run.precision = float32

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
