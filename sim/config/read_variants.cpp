#include "config/key_readers.hpp"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "config/values.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/measures/measure_registry.hpp"
#include "kernel/ops/xpos.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

// --- Variants (docs/science/gradients.md) ---
// residual.skip and residual.mixing (the skip gain a of X <- a X + alpha F(X)), weights.branch_gain
// and attention.shape_* (A <- a A + b I - c C). Resolved values stay out of the stored text, so a
// stored configuration reruns as given.
void read_variants(KeyValues& v, Config& c) {
  c.residual_mixing = read_enum(v, "residual.mixing", mixing_names());
  const double alpha = c.residual_alpha, L = c.model.layers;
  const bool skip_given = !is_auto(v, "residual.skip"), gain_given = !is_auto(v, "weights.branch_gain");
  const auto refuse = [&](const std::string& why) {
    throw UsageError("key 'residual.mixing' = " + v["residual.mixing"] + ": " + why);
  };
  if (c.residual_mixing != ResidualMixing::none && skip_given)
    refuse("it sets the skip gain; give residual.skip or residual.mixing, not both");
  if (c.residual_mixing != ResidualMixing::none && alpha == 0.0) refuse("needs a residual (residual.alpha != 0)");
  c.residual_skip = skip_given ? read_number(v, "residual.skip") : 1.0;
  if (c.residual_mixing == ResidualMixing::cowsik) {
    if (!(std::abs(alpha) <= 1.0)) refuse("cowsik needs |residual.alpha| <= 1 (a = sqrt(1 - alpha^2))");
    c.residual_skip = std::sqrt(1.0 - alpha * alpha);
  } else if (c.residual_mixing == ResidualMixing::deepnorm) {
    if (c.norm.position != NormPosition::post) refuse("deepnorm is post-LN: needs norm.position = post");
    c.residual_skip = std::pow(2.0 * L, 0.25);
  }
  c.weights.branch_gain = gain_given                                          ? read_number(v, "weights.branch_gain")
                          : c.residual_mixing == ResidualMixing::deepnorm ? std::pow(8.0 * L, -0.25)
                                                                            : 1.0;
  if (c.residual_skip != 1.0) {
    const std::string key = skip_given ? "residual.skip" : "residual.mixing";
    if (alpha == 0.0) throw UsageError("key 'residual.skip': a skip gain needs a residual (residual.alpha != 0)");
    if (c.norm.position == NormPosition::ngpt)
      throw UsageError("key '" + key + "': nGPT's step X + a (N(F(X)) - X) has its own skip weight 1 - a; not with "
                       "norm.position = ngpt");
    if (c.integrator == Integrator::rk4)
      throw UsageError("key '" + key + "': the rk4 step fixes the skip; not with dynamics.integrator = rk4");
  }
}

// residual.mlp_alpha (docs/science/gradients.md): the MLP sub-block's own branch weight alpha_M; its
// skip gain follows residual.mixing as the attention's does (cowsik: sqrt(1 - alpha_M^2)).
void read_mlp_residual(KeyValues& v, Config& c) {
  if (is_auto(v, "residual.mlp_alpha")) return;
  const double a = read_number(v, "residual.mlp_alpha");
  const auto refuse = [&](const std::string& why) {
    throw UsageError("key 'residual.mlp_alpha' = " + v["residual.mlp_alpha"] + ": " + why);
  };
  if (c.mlp.width == 0) refuse("needs an MLP sub-block (mlp.width > 0)");
  c.residual_mlp_alpha = a;
  if (c.residual_mixing == ResidualMixing::cowsik) {
    if (!(std::abs(a) <= 1.0)) refuse("cowsik needs |residual.mlp_alpha| <= 1 (a_M = sqrt(1 - alpha_M^2))");
    c.residual_mlp_skip = std::sqrt(1.0 - a * a);
  } else if (c.residual_skip != 1.0 && a == 0.0) {
    refuse("a skip gain needs a residual (residual.mlp_alpha != 0)");
  }
}

// attention.logit_bias and attention.decay (docs/science/gradients.md): gamma only with decay.
// (QK-normalisation's and the rotary embedding's checks are in their declarations, config/keys.cpp.)
void read_logit_bias(KeyValues& /*v: read by the declarations*/, Config& c) {
  if (c.attention.logit_bias.gamma != 1.0 && c.attention.logit_bias.kind != LogitBiasKind::decay)
    throw UsageError("key 'attention.decay': needs attention.logit_bias = decay");
}

// residual.depth_scaling (alpha / sqrt(L), applied in layer_params) and norm.depth_scaling (pre-LN
// output times 1/sqrt(l), applied per block by at_layer) (docs/science/gradients.md).
void read_depth_scaling(KeyValues& v, Config& c) {
  c.residual_depth_scaling = read_enum(v, "residual.depth_scaling", residual_depth_scaling_names());
  c.norm_depth_scaling = read_enum(v, "norm.depth_scaling", norm_depth_scaling_names());
  if (c.residual_depth_scaling != ResidualDepthScaling::none) {
    const auto refuse = [&](const std::string& why) {
      throw UsageError("key 'residual.depth_scaling' = " + v["residual.depth_scaling"] + ": " + why);
    };
    if (c.residual_alpha == 0.0) refuse("needs a residual (residual.alpha != 0)");
    if (c.residual_mixing != ResidualMixing::none) refuse("not with residual.mixing (which alpha sets the skip?)");
    if (c.integrator == Integrator::rk4) refuse("not with dynamics.integrator = rk4 (dt = residual.alpha)");
  }
  if (c.norm_depth_scaling != NormDepthScaling::none && c.norm.position != NormPosition::pre)
    throw UsageError("key 'norm.depth_scaling' = " + v["norm.depth_scaling"] +
                     ": LayerNorm scaling scales the pre-LN normalisations; needs norm.position = pre");
}

// Differential attention (kernel/ops/differential_attention.hpp): plain softmax heads split in halves.
// The head-averaged attention A = mean_h (A1 - lambda A2) has row sums 1 - lambda and may have negative
// entries: its rank (attn_rank) and the stored matrices are defined, the ergodicity coefficient of
// products (a contraction coefficient of stochastic matrices) is not, and is refused.
void check_differential(KeyValues& v, Config& c) {
  const AttentionSettings& a = c.attention;
  if (!a.differential) {
    if (!is_auto(v, "attention.diff_lambda"))
      throw UsageError("key 'attention.diff_lambda': needs attention.differential = true");
    if (a.diff_head_norm) throw UsageError("key 'attention.diff_head_norm': needs attention.differential = true");
    return;
  }
  const auto refuse = [](const std::string& why) {
    throw UsageError("key 'attention.differential' = true: " + why);
  };
  if (c.model.key_dim % 2 != 0)
    refuse("splits each head's queries and keys in halves; needs an even model.key_dim (got " +
           std::to_string(c.model.key_dim) + ")");
  if (a.rope && c.model.key_dim % 4 != 0)
    refuse("with attention.rope each half of d_k is rotated as a head of d_k / 2 pairs; needs model.key_dim a "
           "multiple of 4 (got " + std::to_string(c.model.key_dim) + ")");
  AttentionSettings plain = a;  // the first other setting that leaves plain softmax logits (RoPE allowed)
  plain.differential = false;
  plain.rope = false;
  const char* other = plain.general_path_setting();
  if (other) refuse(std::string("two softmax maps of plain logits; not with ") + other);
  if (a.shape.active()) refuse("not with shaped attention (attention.shape_a/b/c)");
  if (wants_pass(c, MeasurePass::attention_product))
    refuse("the ergodicity coefficient is a contraction coefficient of stochastic matrices; rows of A1 - lambda A2 "
           "sum to 1 - lambda and may be negative (leave ergodicity out of output.measures)");
}

// xPos scales q and k by zeta^(+-p/B) over centred positions p (kernel/ops/xpos.hpp): refused up front
// where the factors, or with keys after the query the logits, would leave the precision's range (a
// custom mask counts as one that may have keys after the query).
void check_xpos(const Config& c) {
  const AttentionSettings& a = c.attention;
  if (!a.xpos) return;
  const MaskType m = c.mask.type;
  const bool after = m != MaskType::causal && m != MaskType::unidirectional_sliding_window;
  const bool f32 = c.run.precision == Precision::float32;
  const int room = f32 ? xpos_log2_headroom<float>() : xpos_log2_headroom<double>();
  const double span = xpos_log2_span(c.model.tokens, a.xpos_scale_base, after);
  if (span <= room) return;
  const double R = room / std::log2(3.5);  // the largest reach / B the range holds
  const long most = after ? static_cast<long>(std::floor(R * a.xpos_scale_base)) + 1
                          : 2 * static_cast<long>(std::floor(R * a.xpos_scale_base));
  std::ostringstream why;
  why << "key 'attention.xpos': model.tokens = " << c.model.tokens << " with attention.xpos_scale_base = "
      << a.xpos_scale_base << " (N / B = " << c.model.tokens / a.xpos_scale_base << ") is beyond the limit N / B of "
      << "about " << static_cast<int>(after ? R : 2 * R) << " in " << (f32 ? "float32" : "float64")
      << " with mask.type = " << enum_name(m, mask_names()) << " ("
      << (after ? "keys after the query: the logits grow as (7/2)^((j - i)/B)"
                : "the factors zeta^(+-p/B) of the centred positions p reach (7/2)^(N/(2B))")
      << "); at most " << most << " tokens at this B: give a larger attention.xpos_scale_base or fewer model.tokens";
  throw UsageError(why.str());
}

// What model.beta_log_power and attention.diff_lambda derive, checked for finiteness up front (issue 47):
// the logit scale beta = model.beta (ln N)^p within [1/B, B], B = 1/sqrt(DBL_MIN) (d_qk = 1/beta^2 a
// positive normal double), in float32 also B = FLT_MAX / 2 (the kernels scale the queries by beta, sqrt(2)
// beta in differential attention, as a float); |lambda| <= sqrt of the precision's largest number (the head
// norm and the attention measures square lambda A2's entries).
void check_derived_scales(KeyValues& v, const Config& c) {
  const bool f32 = c.run.precision == Precision::float32;
  const double beta_limit =
      f32 ? std::numeric_limits<float>::max() / 2.0 : 1.0 / std::sqrt(std::numeric_limits<double>::min());
  const double beta = c.model.beta, p = read_number(v, "model.beta_log_power");
  const char* precision = f32 ? "float32" : "float64";
  if (!(beta <= beta_limit && beta >= 1.0 / beta_limit)) {
    const char* key = p != 0.0 ? "model.beta_log_power" : is_auto(v, "model.beta") ? "model.d_qk" : "model.beta";
    std::ostringstream why;
    why << "key '" << key << "' = " << v[key] << ": the logit scale beta = " << beta << " is beyond the limit ["
        << 1.0 / beta_limit << ", " << beta_limit << "] of " << precision << " (d_qk = 1/beta^2 a positive double"
        << (f32 ? ", beta a float" : "") << ")";
    if (p != 0.0) {
      const double base = 1.0 / std::sqrt(read_number(v, "model.d_qk"));  // d_qk as given (stored before the scaling)
      const double per = std::log(std::log(static_cast<double>(c.model.tokens)));  // log of ln N
      const double a = std::log(beta_limit / base) / per, b = std::log(1.0 / (beta_limit * base)) / per;
      why << "; beta = model.beta (ln N)^p at model.tokens = " << c.model.tokens << " allows p in [" << std::min(a, b)
          << ", " << std::max(a, b) << "]";
    }
    throw UsageError(why.str());
  }
  if (!c.attention.differential || std::isnan(c.attention.diff_lambda)) return;
  const double lambda_limit = f32 ? std::sqrt(static_cast<double>(std::numeric_limits<float>::max()))
                                  : std::sqrt(std::numeric_limits<double>::max());
  if (std::abs(c.attention.diff_lambda) <= lambda_limit) return;
  std::ostringstream why;
  why << "key 'attention.diff_lambda' = " << v["attention.diff_lambda"] << ": |lambda| is beyond the limit "
      << lambda_limit << " of " << precision << " (the square root of its largest number: the head norm and the "
      << "attention measures square the entries of lambda A2); give |lambda| <= " << lambda_limit;
  throw UsageError(why.str());
}

}  // namespace rcsim
