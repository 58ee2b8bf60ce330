// White noise in the particle dynamics (docs/science/particles.md): in X(0) (init.noise, e.g.
// Bruno et al.'s "uniform + small noise") and after every layer (dynamics.noise, the noisy
// transformer). Each comes from a random stream of its own, (seed, trial, kInitNoiseStream) and
// (seed, trial, kDynamicsNoiseStream): a run with noise 0 is the run without the keys, and a
// noisy run does not depend on the thread count.
#pragma once

#include <cstdint>

#include "kernel/model/model_spec.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/model/random.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {


// X(0) <- X(0) + init.noise G, G i.i.d. N(0, 1); for init.type = sphere or circle each row is then
// projected back onto the unit sphere (the tokens start on the sphere, as without noise).
void add_initial_noise(const ModelSpec& c, int trial, Matrix& X);

// The noise of each layer: X <- P(X + sigma sqrt(dt) G) after the block, G i.i.d. N(0, 1) drawn
// afresh per layer, sigma = dynamics.noise, dt = |residual.alpha| (1 when residual.alpha = 0), P the
// normalisation (none or sphere; config refuses the others). An Euler-Maruyama step split from
// the deterministic step: the deterministic layer first, then the noise, then P (kernel/trial/trial.hpp).
// The scale sigma sqrt(dt) of `c` (0 without dynamics.noise).
double dynamics_noise_scale(const ModelSpec& c);
// One noise step from the stream `rng` (the trial's kDynamicsNoiseStream): X <- P(X + scale G).
// Returns the number of degenerate rows of P. The derivative passes keep X + scale G in `before`
// (the point where P is linearised).
int apply_dynamics_noise(Matrix& X, double scale, RandomStream& rng, const Normalization& norm,
                         Matrix* before = nullptr);

}  // namespace rcsim
