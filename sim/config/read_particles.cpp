#include "config/key_readers.hpp"

#include <cmath>
#include <string>

#include "config/values.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/measures/measure_registry.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

// --- Particles (docs/science/particles.md) ---
// dynamics.integrator: rk4 integrates the flow of the attention sub-block alone, with step
// dt = residual.alpha, so it needs a residual, norm.position = post, no MLP and no dropout.
void parse_integrator(KeyValues& v, Config& c) {
  c.integrator = read_enum(v, "dynamics.integrator", integrator_names());
  if (c.integrator != Integrator::rk4) return;
  const auto refuse = [](const std::string& why) {
    throw UsageError("key 'dynamics.integrator': rk4 needs " + why);
  };
  if (c.residual_alpha == 0.0) refuse("a step size dt = residual.alpha != 0");
  if (c.norm.position != NormPosition::post) refuse("norm.position = post");
  if (c.mlp.width > 0) refuse("mlp.width = 0 (the flow is the attention sub-block alone)");
  if (c.dropout.attention > 0.0 || c.dropout.output > 0.0) refuse("dropout.attention = dropout.output = 0");
}

// dynamics.speed = unit and dynamics.merge_distance (docs/science/particles.md section 6): steps of the
// attention sub-block's Euler step that the reverse and forward-mode passes do not cover. After read_output.
void parse_speed_and_merge(KeyValues& v, Config& c) {
  c.dynamics_speed = read_enum(v, "dynamics.speed", speed_names());
  c.merge_distance = read_number(v, "dynamics.merge_distance");
  const bool unit = c.dynamics_speed == DynamicsSpeed::unit;
  if (!unit && c.merge_distance == 0.0) return;
  const std::string key = unit ? "dynamics.speed" : "dynamics.merge_distance";
  const auto refuse = [&](const std::string& why) {
    throw UsageError("key '" + key + "' = " + v[key] + ": needs " + why);
  };
  if (c.integrator != Integrator::euler) refuse("dynamics.integrator = euler");
  if (c.residual_alpha == 0.0) refuse("a step residual.alpha != 0");
  if (c.norm.position != NormPosition::post) refuse("norm.position = post");
  if (c.mlp.width > 0) refuse("mlp.width = 0 (the flow is the attention sub-block alone)");
  if (c.dropout.attention > 0.0 || c.dropout.output > 0.0) refuse("dropout.attention = dropout.output = 0");
  if (wants_pass(c, MeasurePass::gradients))
    refuse("no gradient or Jacobian measure in output.measures (the reverse pass does not cover it)");
}

// dynamics.noise: X <- P(X + sigma sqrt(dt) G) after each layer, P the normalisation, which must
// be none or sphere after the block (the particle setting).
void parse_dynamics_noise(KeyValues& v, Config& c) {
  c.dynamics_noise = read_number(v, "dynamics.noise");
  if (!(c.dynamics_noise > 0.0)) return;
  if (c.norm.type != NormType::none && (c.norm.type != NormType::sphere || c.norm.position != NormPosition::post))
    bad_value("dynamics.noise", v["dynamics.noise"], "noise needs norm.type = none, or sphere with norm.position = post");
}

// init.type = circle | equiangular | isometric and init.rho.
void parse_particle_init(KeyValues& v, Config& c) {
  const int N = c.model.tokens, d = c.model.dim;
  c.init.rho = read_number(v, "init.rho");
  c.init.noise = read_number(v, "init.noise");
  const std::string type = v["init.type"];
  if (c.init.type == InitType::circle && d < 2) bad_value("init.type", type, "circle needs model.dim >= 2");
  if ((c.init.type == InitType::equiangular || c.init.type == InitType::isometric) && N > d)
    bad_value("init.type", type, type + " needs model.tokens <= model.dim (N orthonormal directions)");
  const double lowest = N > 1 ? -1.0 / (N - 1) : -1.0;  // G = (1 - rho) I + rho 1 1^T >= 0
  if (c.init.type == InitType::equiangular && !(c.init.rho >= lowest && c.init.rho <= 1.0))
    bad_value("init.rho", v["init.rho"], "the Gram matrix needs -1/(N-1) <= rho <= 1");
}

// model.*, attention.kind; derived defaults (d_k, d_QK) written out.

}  // namespace rcsim
