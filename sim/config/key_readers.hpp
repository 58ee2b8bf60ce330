// The readers of groups of configuration keys that config.cpp's read_keys calls in order (each
// validates its keys and the cross-key rules of its group): the particle dynamics
// (config/read_particles.cpp, docs/science/particles.md) and the block variants
// (config/read_variants.cpp, docs/science/gradients.md).
#pragma once

#include <stdexcept>
#include <string>

#include "config/config.hpp"
#include "config/keys.hpp"
#include "config/names.hpp"

namespace rcsim {

// The enum of a choice key's value (validated against its declared choices).
template <class Enum>
Enum read_enum(const KeyValues& v, const std::string& key, const NameTable<Enum>& names) {
  const std::string name = read_choice(v, key);
  for (const auto& [n, value] : names)
    if (n == name) return value;
  throw std::logic_error("choice " + name + " of " + key + " has no enum value");
}

// Particles: dynamics.integrator, dynamics.noise (after the normalisation keys), init.* (after
// model.*), dynamics.speed and dynamics.merge_distance (after every other key).
void parse_integrator(KeyValues& v, Config& c);
void parse_dynamics_noise(KeyValues& v, Config& c);
void parse_particle_init(KeyValues& v, Config& c);
void parse_speed_and_merge(KeyValues& v, Config& c);

// Variants: residual.skip / mixing, weights.branch_gain, attention.shape_*; residual.mlp_*;
// attention.logit_bias; the depth scalings (QK-norm's and rope's checks: their declarations, config/keys.cpp).
void read_variants(KeyValues& v, Config& c);
void read_mlp_residual(KeyValues& v, Config& c);
void read_logit_bias(KeyValues& v, Config& c);
void read_depth_scaling(KeyValues& v, Config& c);
// attention.differential, diff_lambda, diff_head_norm: their cross-key checks (after output.*).
void check_differential(KeyValues& v, Config& c);
// attention.xpos: the decay's range at model.tokens, attention.xpos_scale_base, mask.type and
// run.precision (kernel/ops/xpos.hpp, xpos_log2_span; after run.*).
void check_xpos(const Config& c);
// model.beta_log_power's beta and attention.diff_lambda within run.precision's range (after run.*).
void check_derived_scales(KeyValues& v, const Config& c);

}  // namespace rcsim
