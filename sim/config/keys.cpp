#include "config/keys.hpp"

#include <algorithm>
#include <set>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "config/key_builders.hpp"
#include "config/key_into.hpp"
#include "config/names.hpp"
#include "config/values.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {
using namespace key_builders;

const std::vector<WeightType> kQKWeights = {WeightType::gaussian, WeightType::orthogonal, WeightType::identity,
                                            WeightType::zero,     WeightType::fixed,      WeightType::file};

// The cross-key check of a transform of query and key pairs (2j, 2j+1) that the key's boolean `on`
// turns on (attention.rope, attention.xpos): an even model.key_dim, and queries and keys.
KeyDecl on_qk_pairs(KeyDecl k, bool AttentionSettings::*on, std::string what) {
  const std::string key = k.key;
  return checked(std::move(k), [key, on, what](const ModelSpec& c) {
    if (c.attention.*on && (c.model.key_dim % 2 != 0 || c.attention.kind == AttentionKind::random_markov))
      throw UsageError("key '" + key + "': " + what + "; needs an even model.key_dim and attention.kind other than "
                       "random_markov");
  });
}

// The model: shape and attention (block_keys: mask, normalisation, residual, dynamics, dropout, MLP).
std::vector<KeyDecl> model_keys() {
  return {
      integer("model.tokens", text_of(kernel_default().model.tokens), 1, "number of tokens N (rows of X)"),
      integer("model.dim", text_of(kernel_default().model.dim), 1, "token dimension d (columns of X)"),
      integer("model.layers", text_of(kernel_default().model.layers), 1, "depth L (number of attention layers)"),
      integer("model.heads", text_of(kernel_default().model.heads), 1, "number of attention heads H (Y = sum_h A_h X W_V,h)"),
      omitted_at_default(integer("model.kv_heads", "auto", 1,
             "key/value heads H_kv (grouped-query attention): query head h uses W_K, W_V (b_K, b_V) of "
             "key/value head h / (H / H_kv); must divide model.heads", "H")),
      integer("model.key_dim", "auto", 1, "query/key dimension d_k", "d"),
      per_layer(number("model.d_qk", "auto", kPositive, "temperature d_QK in S = XW_Q (XW_K)^T / sqrt(d_QK); a fraction a/b is "
             "allowed (1/64)", "d_k")),
      // --- Peer dynamics (docs/science/peers.md) ---
      per_layer(number("model.beta", "auto", kPositive,
             "inverse temperature beta = 1/sqrt(d_QK): give model.beta or model.d_qk (both: they must agree)",
             "1/sqrt(d_QK)")),
      omitted_at_default(number("model.beta_log_power", "0", kAny,
                                "long-context temperature: beta = model.beta (ln N)^p, N = model.tokens >= 2 (d_QK / "
                                "(ln N)^(2p)), at most 6.7e153 (float64), 1.7e38 (float32); 0 = model.beta as given")),
      per_layer(into(choice("model.head_mix", text_of(kernel_default().model.head_mix, head_mix_names()), names_of(head_mix_names()),
             "how heads combine: sum (Y = sum_h A_h X W_V,h) | mean (Y = sum_h ... / H)"), RCSIM_SPEC_MEMBER(model.head_mix), head_mix_names)),
      integer("model.value_dim", text_of(kernel_default().model.value_dim), 0,
              "per-head value width d_v: W_V,h is d x d_v and head h adds A_h X W_V,h W_O,h (W_O,h d_v x d, "
              "weights.o); 0 = no output projection, W_V,h is d x d"),
      // --- Settings per layer range (docs/science/gradients.md) ---
      omitted_at_default(text(
          "model.layer_overrides", "none",
          "none | entries FROM-TO:key=value separated by ';' (several keys of one range separated by ','; TO "
          "omitted: to the last block; FROM alone: one block)",
          "block settings per range of blocks (0-based, inclusive; ranges disjoint and inside 0..model.layers-1); "
          "blocks outside every range keep the keys' own values. Keys allowed: the block settings declared per "
          "layer: norm.type/eps/gain/bias/position, residual.alpha/skip/mlp_alpha, model.d_qk/beta/head_mix, "
          "mlp.activation, attention.* but attention.bias. Mix-LN: 0-3:norm.position=post; "
          "4-:norm.position=pre")),
  };
}

// attention.diff_lambda: a number, or auto (NaN in the spec: lambda_init of each layer).
KeyDecl diff_lambda_key() {
  KeyDecl k = omitted_at_default(number("attention.diff_lambda", "auto", kAny,
                                        "lambda of attention.differential (the second map's weight); |lambda| <= "
                                        "1.3e154 (float64), 1.8e19 (float32)",
                                        "the paper's lambda_init(l) = 0.8 - 0.6 exp(-0.3 (l - 1)) at layer l"));
  k.read = [](const KeyValues& v, ModelSpec& c) {
    c.attention.diff_lambda = is_auto(v, "attention.diff_lambda") ? std::numeric_limits<double>::quiet_NaN()
                                                                   : read_number(v, "attention.diff_lambda");
  };
  return k;
}

// attention.diff_head_scale: the head norm's factor, refused without attention.diff_head_norm.
KeyDecl diff_head_scale_key() {
  return checked(per_layer(into(omitted_at_default(choice(
          "attention.diff_head_scale", text_of(kernel_default().attention.diff_head_scale, diff_head_scale_names()),
          names_of(diff_head_scale_names()),
          "the factor s of attention.diff_head_norm: lambda_init (s = 1 - lambda_init(l), a constant of layer l, as "
          "the paper's code, whatever attention.diff_lambda) | lambda (s = 1 - lambda, the lambda of the maps: rcsim's "
          "earlier convention; 0 at lambda = 1, negative above)")), RCSIM_SPEC_MEMBER(attention.diff_head_scale), diff_head_scale_names)),
              [](const ModelSpec& c) {
                if (c.attention.diff_head_scale != DiffHeadScale::lambda_init && !c.attention.diff_head_norm)
                  throw UsageError("key 'attention.diff_head_scale': needs attention.diff_head_norm = true");
              });
}

// The attention variants (attention.*).
std::vector<KeyDecl> attention_keys() {
  return {
      per_layer(into(choice("attention.kind", text_of(kernel_default().attention.kind, attention_names()), names_of(attention_names()),
             "softmax (rows normalised) | usa (unnormalised: A_ij = exp(beta <x_i W_Q, x_j W_K>) / N on allowed "
             "entries) | hardmax (A_ij = 1/|S_i| on the maximisers S_i of <x_i W_Q, x_j W_K> over the allowed j; ties "
             "within a relative 1e-12, 1e-5 in float32; docs/science/particles.md) | random_markov (A = softmax(G) on the "
             "mask, G i.i.d. N(0, 1) per head, drawn with the weights and independent of X: Mind the Gap's random "
             "Markov attention; its gradients reach no W_Q, W_K) | softpick (Zuhri et al. 2025: A_ij = ReLU(e^S_ij - 1) / "
             "(sum_k |e^S_ik - 1| + 1e-8) over the allowed k; docs/science/gradients.md)"), RCSIM_SPEC_MEMBER(attention.kind), attention_names)),
      per_layer(into(omitted_at_default(boolean(
          "attention.usa_normalised", text_of(kernel_default().attention.usa_normalised),
          "true: the USA weights times e^-beta, A_ij = exp(S_ij - beta) / N (exp(beta(<x_i, x_j> - 1)) / N for unit "
          "tokens, W_Q = W_K = I: finite for every beta, where exp(beta <x_i, x_j>) overflows above beta ~ 709); the "
          "same flow in time t e^-beta (Geshkovski, Koubbi et al.'s staircase; docs/science/particles.md section 6); "
          "needs attention.kind = usa")), RCSIM_SPEC_MEMBER(attention.usa_normalised))),
      // --- Variants (docs/science/gradients.md): shaped attention, Noci et al. 2023 ---
      per_layer(into(omitted_at_default(number("attention.shape_a", text_of(kernel_default().attention.shape.a), kAny,
                                "shaped attention A = a softmax(S) + b I - c C (C the uniform attention over the "
                                "mask, row i 1/|N_i| on its allowed set): a")), RCSIM_SPEC_MEMBER(attention.shape.a))),
      per_layer(into(omitted_at_default(number("attention.shape_b", text_of(kernel_default().attention.shape.b), kAny, "shaped attention: b, the weight of the identity")), RCSIM_SPEC_MEMBER(attention.shape.b))),
      per_layer(into(omitted_at_default(number("attention.shape_c", text_of(kernel_default().attention.shape.c), kAny,
                                "shaped attention: c, the weight of the uniform attention C subtracted (a = 1, b = "
                                "0, c = 1: spectral-gap removal A - C, Mind the Gap)")), RCSIM_SPEC_MEMBER(attention.shape.c))),
      per_layer(into(omitted_at_default(choice(
          "attention.logit_bias", text_of(kernel_default().attention.logit_bias.kind, logit_bias_names()),
          names_of(logit_bias_names()),
          "additive bias B on the logits before the softmax, beside the mask (not attention.bias, the projections' "
          "biases): none | alibi (B_ij = -m_h |i - j|, slopes m_h = 2^(-8h/H), h = 1..H) | decay (B_ij = |i - j| "
          "log gamma, gamma = attention.decay: weights proportional to gamma^|i-j|) | file (B from weights.file "
          "/logit_bias [N, N] or [L, N, N], with heads [H, N, N] or [L, H, N, N]; finite values); |i - j| = i - j "
          "under the causal mask")), RCSIM_SPEC_MEMBER(attention.logit_bias.kind), logit_bias_names)),
      per_layer(into(omitted_at_default(number("attention.decay", text_of(kernel_default().attention.logit_bias.gamma),
                                Range{0.0, true, 1.0, false},
                                "gamma in (0, 1] of attention.logit_bias = decay")), RCSIM_SPEC_MEMBER(attention.logit_bias.gamma))),
      checked(per_layer(into(omitted_at_default(boolean(
          "attention.qk_norm", text_of(kernel_default().attention.qk_norm),
          "true: QK-normalisation (nGPT): the rows of Q and K to s q_i/|q_i|, s k_j/|k_j| per head (s = "
          "attention.qk_scale; a zero row stays 0) and the logits sqrt(d_k) Q K^T instead of Q K^T / sqrt(d_QK) "
          "(model.d_qk and model.beta refused with it)")), RCSIM_SPEC_MEMBER(attention.qk_norm))),
          [](const ModelSpec& c) {  // the logits' scale is sqrt(d_k): a temperature given with it is refused
            if (c.attention.qk_norm && c.attention.kind == AttentionKind::random_markov)
              throw UsageError("key 'attention.qk_norm': random_markov attention has no queries and keys");
            if (c.attention.qk_norm && c.model.d_qk != static_cast<double>(c.model.key_dim))  // d_qk or beta given
              throw UsageError("key 'attention.qk_norm': the logits are scaled by sqrt(d_k); a temperature model.d_qk "
                               "or model.beta other than d_k is not used with it (give model.key_dim, attention.qk_scale)");
          }),
      checked(per_layer(into(omitted_at_default(number("attention.qk_scale", text_of(kernel_default().attention.qk_scale), kAny,
                                "s_qk of attention.qk_norm: logits sqrt(d_k) s^2 cos(q_i, k_j)")), RCSIM_SPEC_MEMBER(attention.qk_scale))),
              [](const ModelSpec& c) {
                if (!c.attention.qk_norm && c.attention.qk_scale != 1.0)
                  throw UsageError("key 'attention.qk_scale': needs attention.qk_norm = true");
              }),
      per_layer(into(omitted_at_default(number("attention.logit_softcap", text_of(kernel_default().attention.logit_softcap), kNonNegative,
                                "logit soft-capping (Gemma 2): every head's logits (after their scale and the logit "
                                "bias) to c tanh(S / c) before the attention weights; 0 = off")), RCSIM_SPEC_MEMBER(attention.logit_softcap))),
      on_qk_pairs(per_layer(into(omitted_at_default(boolean("attention.rope", text_of(kernel_default().attention.rope), "true: rotary position embedding (RoPE, llama2.c's adjacent pairs): token i's q_i and k_i per head rotated pair by pair (2j, 2j+1) by the angle i theta^(-2j/d_k) before the logits; needs an even d_k")), RCSIM_SPEC_MEMBER(attention.rope))), &AttentionSettings::rope, "rotates pairs of query and key components"),
      per_layer(into(omitted_at_default(number("attention.rope_theta", text_of(kernel_default().attention.rope_theta), kPositive, "theta of attention.rope (Llama 2: 10000)")), RCSIM_SPEC_MEMBER(attention.rope_theta))),
      on_qk_pairs(per_layer(into(omitted_at_default(boolean("attention.xpos", text_of(kernel_default().attention.xpos), "true: xPos relative-position decay (Sun et al. 2023): token i's pair (2j, 2j+1) of q_i times zeta_j^(p_i/B), of k_i times zeta_j^(-p_i/B), zeta_j = (2j + 0.4 d_k)/(1.4 d_k), B = attention.xpos_scale_base, p_i = i - ceil(N/2) (centred as torchscale), so S_ij decays as zeta^((i-j)/B) (after attention.rope when both); needs an even d_k and N / B within the precision's range (refused with the limit)")), RCSIM_SPEC_MEMBER(attention.xpos))), &AttentionSettings::xpos, "scales pairs of query and key components"),
      per_layer(into(omitted_at_default(number("attention.xpos_scale_base", text_of(kernel_default().attention.xpos_scale_base), kPositive, "B of attention.xpos (torchscale: 512)")), RCSIM_SPEC_MEMBER(attention.xpos_scale_base))),
      // --- Differential attention (Ye et al. 2024; kernel/ops/differential_attention.hpp) ---
      per_layer(into(omitted_at_default(boolean(
          "attention.differential", text_of(kernel_default().attention.differential),
          "true: differential attention (Ye et al. 2024): each head's queries and keys split in halves, A = "
          "softmax(Q1 K1^T / sqrt(d_QK/2)) - lambda softmax(Q2 K2^T / sqrt(d_QK/2)) (rows sum to 1 - lambda); needs "
          "an even model.key_dim and plain softmax attention, with attention.rope allowed (each half rotated as a "
          "head of d_k / 2, as the paper's code; model.key_dim a multiple of 4)")), RCSIM_SPEC_MEMBER(attention.differential))),
      per_layer(diff_lambda_key()),
      per_layer(into(omitted_at_default(boolean(
          "attention.diff_head_norm", text_of(kernel_default().attention.diff_head_norm),
          "true: each differential head's output s RMSNorm(A X W_V) (eps 1e-5) before W_O, the paper's per-head "
          "normalisation, s of attention.diff_head_scale; needs attention.differential")), RCSIM_SPEC_MEMBER(attention.diff_head_norm))),
      diff_head_scale_key(),
      into(omitted_at_default(boolean(
          "attention.bias", text_of(kernel_default().attention_bias),
          "true: biases in the attention (GPT-2's c_attn and c_proj biases): Q = X W_Q + 1 b_Q^T, K and V likewise per "
          "head, b_O added to the sum over heads; zero unless read from weights.file (/b_Q, /b_K, /b_V with weights.q, "
          "k, v = file; /b_O with weights.o = file, or weights.v = file without model.value_dim) or given as arrays")), RCSIM_SPEC_MEMBER(attention_bias)),
  };
}

// The mask, normalisation and residual keys (after model_keys, in --help order).
std::vector<KeyDecl> block_keys() {
  return {
      choice("mask.type", text_of(kernel_default().mask.type, mask_names()), names_of(mask_names()), "attention mask (docs/science/model-spec.md)"),
      integer("mask.window", text_of(kernel_default().mask.window), 1, "window width w of the sliding-window masks"),
      file("mask.file", "", "HDF5 file with dataset /mask [N, N] (nonzero = may attend), for custom"),
      per_layer(into(choice("norm.type", text_of(kernel_default().norm.type, norm_names()), names_of(norm_names()), "row normalisation after attention"), RCSIM_SPEC_MEMBER(norm.type), norm_names)),
      per_layer(into(number("norm.eps", text_of(kernel_default().norm.eps), kNonNegative, "epsilon of layernorm and rmsnorm"), RCSIM_SPEC_MEMBER(norm.eps))),
      per_layer(into(omitted_at_default(number("norm.alpha", text_of(kernel_default().norm.alpha), kAny,
                                 "input scale a of dyt (g tanh(a y) + b, Zhu et al. 2025) and derf (g erf(a y) + b, "
                                 "Chen et al. 2025)")), RCSIM_SPEC_MEMBER(norm.alpha))),
      per_layer(of_kind(KeyKind::numbers, "norm.gain", "1", "gain g of layernorm/rmsnorm/dyt/derf")),
      per_layer(of_kind(KeyKind::numbers, "norm.bias", "0", "bias b of layernorm/dyt/derf")),
      per_layer(into(choice("norm.position", text_of(kernel_default().norm.position, norm_position_names()), names_of(norm_position_names()),
             "where the normalisation N sits, a = residual.alpha: post (N(X + a A(X)), or N(A(X)) without "
             "residual; the paper's model) | pre (X + a A(N(X))) | peri (X + a N(A(N(X)))) | ngpt (N(X + a (N(A(X)) - "
             "X)), nGPT, docs/science/peers.md); without residual (a = 0) pre gives A(N(X)) and peri N(A(N(X)))"), RCSIM_SPEC_MEMBER(norm.position), norm_position_names)),
      choice("norm.params", kernel_default().norm.params_from_file ? "file" : "config", {"config", "file"},
             "gains and biases of the normalisations: config (norm.gain, norm.bias for every one) | file (each "
             "normalisation of each layer from weights.file: /norm_attn_gain, /norm_attn_bias, /norm_attn_out_*, "
             "/norm_mlp_*, /norm_mlp_out_*; layernorm, rmsnorm, dyt and derf only)"),
      per_layer(into(number("residual.alpha", text_of(kernel_default().residual_alpha), kAny, "residual weight: Y = X + alpha * attention(X); 0 = no residual"), RCSIM_SPEC_MEMBER(residual_alpha))),
      into(choice("residual.project", text_of(kernel_default().residual_project, project_names()), names_of(project_names()),
             "none | tangent: Y = X + alpha P(attention(X)), P removes from each row its component along x_i"), RCSIM_SPEC_MEMBER(residual_project), project_names),
      // --- Variants (docs/science/gradients.md) ---
      per_layer(omitted_at_default(number(
          "residual.skip", "auto", kAny,
          "skip gain a of the residual X <- a X + alpha F(X) (F the attention or MLP branch; post: N(a X + alpha "
          "F(X)), pre and peri likewise; needs residual.alpha != 0; not with norm.position = ngpt)",
          "1, or what residual.mixing sets"))),
      per_layer(omitted_at_default(number(
          "residual.mlp_alpha", "auto", kAny,
          "branch weight alpha_M of the MLP sub-block, X <- a_M X + alpha_M M(X) (Cowsik et al. 2024's MLP "
          "residual strength beside the attention's residual.alpha; nGPT's MLP step size); its skip gain a_M follows "
          "residual.mixing (cowsik: sqrt(1 - alpha_M^2)) or residual.skip; scaled by residual.depth_scaling; "
          "needs mlp.width > 0",
          "residual.alpha"))),
      omitted_at_default(choice(
          "residual.mixing", text_of(kernel_default().residual_mixing, mixing_names()), names_of(mixing_names()),
          "how the skip gain a is set: none (a = residual.skip) | cowsik (a = sqrt(1 - alpha^2), Cowsik et al. 2024; "
          "needs 0 < |alpha| <= 1) | deepnorm (a = (2L)^(1/4) and weights.branch_gain auto = (8L)^(-1/4), L = "
          "model.layers, Wang et al. 2022; needs norm.position = post; DeepNorm proper has residual.alpha = 1)")),
      omitted_at_default(choice(
          "residual.depth_scaling", text_of(kernel_default().residual_depth_scaling, residual_depth_scaling_names()),
          names_of(residual_depth_scaling_names()),
          "none | inv_sqrt_depth: the branch gain residual.alpha divided by sqrt(L), L = model.layers (the "
          "1/sqrt(L) residual scaling of Noci et al. 2022); needs a residual; not with residual.mixing, rk4")),
      omitted_at_default(choice(
          "norm.depth_scaling", text_of(kernel_default().norm_depth_scaling, norm_depth_scaling_names()),
          names_of(norm_depth_scaling_names()),
          "none | inv_sqrt_layer: the output of the normalisations of layer l (1-based) multiplied by 1/sqrt(l) "
          "(LayerNorm scaling, Sun et al. 2025, The Curse of Depth); needs norm.position = pre")),
  };
}

// The particle dynamics' keys (docs/science/particles.md), after block_keys.
std::vector<KeyDecl> particle_keys() {
  return {
      omitted_at_default(choice(
          "dynamics.integrator", text_of(kernel_default().integrator, integrator_names()), names_of(integrator_names()),
          "euler (Y = X + alpha F(X), the layer as it is) | rk4 (one classical Runge-Kutta step of size dt = "
          "residual.alpha of the flow dX/dt = F(X), F the attention output, P-projected with residual.project = "
          "tangent, then the normalisation; needs norm.position = post, no MLP, no dropout). Runs with rk4 or "
          "tangent store /time = dt x layer (docs/science/particles.md)")),
      omitted_at_default(choice(
          "dynamics.speed", text_of(kernel_default().dynamics_speed, speed_names()), names_of(speed_names()),
          "field (X + alpha F(X)) | unit (X + alpha F(X) / |F(X)|_F, |.|_F over all tokens: the flow's path at "
          "unit speed, alpha the arc length of a step, /time the arc length; F = 0 stays put; needs "
          "dynamics.integrator = euler, a residual, norm.position = post, no MLP, no dropout, no gradient measures; "
          "docs/science/particles.md section 6)")),
      omitted_at_default(number(
          "dynamics.merge_distance", text_of(kernel_default().merge_distance), kNonNegative,
          "after each step, tokens j > i closer than this (Euclidean) to token i become x_i (in order of i, j); "
          "0 = never. Same conditions as dynamics.speed = unit (docs/science/particles.md section 6)")),
      omitted_at_default(number(
          "dynamics.noise", text_of(kernel_default().dynamics_noise), kNonNegative,
          "noisy transformer: after each layer X <- P(X + sigma sqrt(dt) G), G i.i.d. N(0, 1) from the stream (seed, "
          "trial, 14), dt = |residual.alpha| (1 if 0), P = norm.type (none, or sphere with norm.position = post); "
          "the reverse pass replays the same draws")),
  };
}

// The dropout and MLP keys, after particle_keys.
std::vector<KeyDecl> dropout_and_mlp_keys() {
  return {
      into(number("dropout.attention", text_of(kernel_default().dropout.attention), kProbability,
             "dropout probability p on every head's attention weights (training mode: kept weights scaled by "
             "1/(1-p); /attention stores the weights before dropout; a stage with p = 0 draws nothing)"), RCSIM_SPEC_MEMBER(dropout.attention)),
      into(number("dropout.output", text_of(kernel_default().dropout.output), kProbability,
             "dropout probability p on the attention output (sum over heads) and on the MLP output, before the "
             "residual (and before peri's output normalisation), scaled by 1/(1-p)"), RCSIM_SPEC_MEMBER(dropout.output)),
      integer("mlp.width", text_of(kernel_default().mlp.width), 0,
              "hidden width m of the MLP sub-block after attention, MLP(X) = act(X W_in + b_in) W_out + b_out, placed "
              "by norm.position with a normalisation of its own; 0 = no MLP"),
      per_layer(into(choice("mlp.activation", text_of(kernel_default().mlp.activation, mlp_activation_names()), names_of(mlp_activation_names()),
             "relu | gelu (exact: x Phi(x) = x (1 + erf(x / sqrt 2)) / 2) | gelu_tanh (GPT-2's tanh approximation) | tanh (odd and bounded: the "
             "classic chaotic activation of mean-field signal propagation) | swiglu (Llama's gated MLP, Shazeer 2020: (silu(X W_in + b_in) .* (X W_gate)) "
             "W_out + b_out, silu(z) = z / (1 + e^-z), W_gate [d, m] drawn after W_in with its std, or /W_gate of weights.file; in every layer or none)"), RCSIM_SPEC_MEMBER(mlp.activation), mlp_activation_names)),
      boolean("mlp.bias", text_of(kernel_default().mlp.bias), "true: the MLP has biases b_in, b_out (weights.mlp_*_bias_std, or from weights.file)"),
  };
}

// The weights of every layer.
std::vector<KeyDecl> weight_keys() {
  const std::string rows = " (rows separated by ';', e.g. 0.5 1; 0 1)";
  return {
      choice("weights.q", text_of(kernel_default().weights.q.type, weight_names()), names_of(weight_names(), kQKWeights), "W_Q [d, d_k]"),
      choice("weights.k", text_of(kernel_default().weights.k.type, weight_names()), names_of(weight_names(), kQKWeights), "W_K [d, d_k]"),
      choice("weights.v", text_of(kernel_default().weights.v.type, weight_names()), names_of(weight_names()),
             "W_V [d, d] ([d, d_v] with model.value_dim > 0): wishart (G G^T / sqrt(d)) | tied_qk (W_V = "
             "weights.v_sign * W_Q W_K^T); identity, wishart and tied_qk need d_v = d (model.value_dim 0 or d)"),
      number("weights.q_std", "auto", kNonNegative, "std of gaussian W_Q entries", "1/sqrt(d)"),
      number("weights.k_std", "auto", kNonNegative, "std of gaussian W_K entries", "1/sqrt(d)"),
      number("weights.v_std", "auto", kNonNegative, "std of gaussian W_V entries", "1/sqrt(d)"),
      of_kind(KeyKind::matrix, "weights.q_matrix", "", "inline W_Q for fixed" + rows),
      of_kind(KeyKind::matrix, "weights.k_matrix", "", "inline W_K for fixed"),
      of_kind(KeyKind::matrix, "weights.v_matrix", "", "inline W_V for fixed"),
      choice("weights.o", text_of(kernel_default().weights.o.type, weight_names()), names_of(weight_names(), kQKWeights),
             "W_O [d_v, d] (needs model.value_dim > 0); identity needs d_v = d"),
      number("weights.o_std", "auto", kNonNegative, "std of gaussian W_O entries (fan-in as for W_V)", "1/sqrt(d_v)"),
      of_kind(KeyKind::matrix, "weights.o_matrix", "", "inline W_O for fixed"),
      choice("weights.mlp", text_of(kernel_default().weights.mlp, weight_names()), names_of(weight_names(), {WeightType::gaussian, WeightType::zero, WeightType::file}),
             "MLP weights W_in [d, m], W_out [m, d] (W_gate [d, m] with swiglu) and biases: gaussian (stds below) | zero | file (/W_in, /W_out, /W_gate, /b_in, /b_out of weights.file)"),
      number("weights.mlp_in_std", "auto", kNonNegative, "std of gaussian W_in (and swiglu's W_gate) entries", "1/sqrt(d)"),
      number("weights.mlp_out_std", "auto", kNonNegative, "std of gaussian W_out entries", "1/sqrt(m)"),
      number("weights.mlp_in_bias_std", text_of(kernel_default().weights.mlp_in_bias_std), kNonNegative, "std of gaussian b_in entries (0 = zero biases)"),
      number("weights.mlp_out_bias_std", text_of(kernel_default().weights.mlp_out_bias_std), kNonNegative, "std of gaussian b_out entries (0 = zero biases)"),
      omitted_at_default(number("weights.branch_gain", "auto", kNonNegative,
                                "gain multiplying W_V, W_O and the MLP's W_in, W_out, W_gate after they are drawn or read "
                                "(DeepNorm's beta; biases, W_Q, W_K unscaled)",
                                "1; (8L)^(-1/4) with residual.mixing = deepnorm")),
      boolean("weights.shared", text_of(kernel_default().weights.shared), "true: one draw of the weights shared by all layers; false: fresh per layer"),
      file("weights.file", "",
           "HDF5 file with /W_Q, /W_K, /W_V (and /W_O, the MLP's /W_in, /b_in, /W_out, /b_out, /W_gate, the normalisations' "
           "/norm_*_gain, /norm_*_bias) for type file"),
      choice("weights.qk", text_of(kernel_default().weights.qk, bilinear_names()), names_of(bilinear_names()),
             "bilinear form B = W_Q W_K^T drawn directly (W_Q = B, W_K = I; needs d_k = d): none (use weights.q, "
             "weights.k) | gaussian_product (G1 G2 / sqrt(d)) | symmetric ((G + G^T) / sqrt(2)) | goe "
             "((G + G^T) / sqrt(2 d)) | wigner (symmetric, every entry N(0, 1)) | identity"),
      text("weights.v_sign", text_of(kernel_default().weights.v_sign), "1 | -1", "sign s of weights.v = tied_qk (W_V = s W_Q W_K^T)"),
      integer("weights.redraw_every", text_of(kernel_default().weights.redraw_every), 1, "K: fresh weights at layers 0, K, 2K, ... (kept in between)"),
      choice("weights.across_trials", kernel_default().weights.shared_across_trials ? "shared" : "independent", {"independent", "shared"},
             "independent (each trial draws its weights) | shared (one weight draw, from a stream of its own, for all "
             "trials)"),
  };
}

// X(0), the run, what is recorded.
std::vector<KeyDecl> input_run_output_keys() {
  return {
choice("init.type", text_of(kernel_default().init.type, init_names()), names_of(init_names()),
             "X(0): gaussian | sphere (uniform on the unit sphere) | positive | fixed | file | uniform (entries uniform "
             "on (-1, 1)) | circle (theta_j = 2 pi j / N in the first two coordinates; d >= 2) | equiangular (unit tokens, "
             "<x_i, x_j> = init.rho; N <= d) | isometric (X X^T = I; N <= d)"),
      of_kind(KeyKind::matrix, "init.matrix", "", "inline X(0) [N, d] for fixed"),
      file("init.file", "", "HDF5 file with /X0 [N, d] or [trials, N, d] for type file"),
      omitted_at_default(text("init.rho", text_of(kernel_default().init.rho), "number; -1/(N-1) <= rho <= 1 for equiangular",
                              "pairwise correlation <x_i, x_j> of init.type = equiangular")),
      omitted_at_default(number("init.noise", text_of(kernel_default().init.noise), kNonNegative,
                                "std sigma of white noise added to X(0): X(0) + sigma G, G i.i.d. N(0, 1) from the "
                                "stream (seed, trial, 13); rows projected back onto the unit sphere for init.type = "
                                "sphere | circle (Bruno et al.'s uniform + noise)")),
      integer("run.trials", text_of(kernel_default().run.trials), 1, "number of independent trials"),
      of_kind(KeyKind::seed, "run.seed", text_of(kernel_default().run.seed), "seed; trial t uses a stream that depends only on (seed, t)"),
      integer("run.threads", text_of(kernel_default().run.threads), 0, "worker threads (0 = all cores); results do not depend on it"),
      choice("run.precision", text_of(kernel_default().run.precision, precision_names()), names_of(precision_names()),
             "float32 computes every block in single precision (matrix products, softmax, normalisations, MLP; "
             "weights, gains and X(0) rounded to float) and the measures in float64 from the float tokens; the "
             "complete mask's float32 results depend on the summation order (docs/science/model-spec.md)"),
      omitted_at_default(choice(
          "run.platform", text_of(kernel_default().run.platform, platform_names()), names_of(platform_names()),
          "which implementation runs the attention (docs/dev/platforms.md): reference (the N x N attention matrix) | "
          "cpu (fused attention without the N x N matrix, one trial on every thread; softmax attention on range "
          "masks without biases, QK-norm, shaping, attention dropout or attention measures) | auto: cpu where it "
          "covers the configuration and model.tokens >= 512, else reference | opencl (the cpu platform's attention "
          "on an OpenCL device: the first GPU, else the first device; RCSIM_OPENCL_DEVICE = k picks the k-th)")),
      file("output.file", kernel_default().output.file,
           "output HDF5 file (written to an exclusive temporary .NAME.XXXXXX.tmp, renamed when complete)"),
      text("output.tokens", kernel_default().output.tokens, "none | final | all | comma list of layers 0 .. L", "token snapshots"),
      boolean("output.spectrum", text_of(kernel_default().output.spectrum), "store the whole singular spectrum per layer"),
      text("output.schedule", kernel_default().output.schedule, "all | every:K | log:K | list:a b c (K an integer >= 1, layers in 0 .. L)",
           "layers at which measures are computed and stored (always 0 and L): every:K multiples of K, log:K K "
           "log-spaced layers per decade, list: the layers given (spaces or commas); docs/user/sweeps.md"),
      text("output.measures", "none", "none | comma list of: " + optional_measure_names_text(),
           "extra measures, opt-in (each described in /metrics attributes and docs/reference/file-formats.md)"),
      boolean("output.attention", text_of(kernel_default().output.attention),
              "store the head-averaged attention matrix (1/H) sum_h A_h of every recorded attention layer in /attention"),
      number("metrics.rank_rtol", "auto", kNonNegative, "relative rank tolerance", "max(N, d) * machine epsilon"),
      number("metrics.rank_atol", text_of(kernel_default().metrics.rank_atol), kNonNegative, "absolute rank tolerance; tol = max(atol, rtol * sigma_max)"),
      omitted_at_default(integer("metrics.jacobian_probes", text_of(kernel_default().metrics.jacobian_probes), 0,
                                 "jacobian_log_fro2 and jacobian_log_fro2_full: 0 = exact (N, or N d, reverse "
                                 "passes); K > 0 = Hutchinson's estimate from K Gaussian probes (K reverse passes, "
                                 "streams 16 and 17); K > 0 is refused with jacobian_log_spec2 (exact only)")),
      omitted_at_default(choice(
          "metrics.readout", text_of(kernel_default().metrics.readout, readout_names()), names_of(readout_names()),
          "the loss of the gradient measures, R ~ N(0, I_d) per trial: all_tokens L = 1^T X(L) R (every token's readout "
          "summed) | last_token L = x_N(L) R (the last token's alone, as a next-token loss reads it); also the outputs "
          "of jacobian_log_fro2/_spec2: the N rows of X(L) R, or the last one (one exact reverse pass; no probes)")),
      omitted_at_default(text("metrics.readout_vector", "gaussian", "gaussian | d numbers",
                              "the readout R of metrics.readout: gaussian (R ~ N(0, I_d) per trial, stream 12) | R "
                              "itself, d finite numbers (spaces or commas), the same in every trial")),
      omitted_at_default(integer("metrics.power_iterations", text_of(kernel_default().metrics.power_iterations), 1,
                                 "jacobian_log_spec2_full: the most power iterations on J_t^T J_t per recorded "
                                 "layer t (each one JVP through blocks t .. L-1 and one VJP back); the value is a "
                                 "lower bound of ||J_t||_2^2 that converges from below")),
      omitted_at_default(number("metrics.power_tolerance", text_of(kernel_default().metrics.power_tolerance),
                                Range{0.0, true, 1.0, true},
                                "jacobian_log_spec2_full: stop when the Rayleigh quotient's relative change "
                                "|lambda_k - lambda_(k-1)| / lambda_k is at most this")),
      // --- Peer measures (docs/science/peers.md) ---
      number("metrics.pair_threshold", text_of(kernel_default().metrics.pair_threshold), kAny,
             "pair_density counts ordered pairs i != j with cos(x_i, x_j) > threshold"),
      number("metrics.cluster_tau", text_of(kernel_default().metrics.cluster_tau), kAny, "clusters: connected components of the graph cos(x_i, x_j) > tau"),
      omitted_at_default(choice("metrics.renyi_distance",
                                text_of(kernel_default().metrics.renyi_distance, renyi_distance_names()),
                                names_of(renyi_distance_names()),
                                "strong_renyi_centres: euclidean ||x_k - x_i|| | geodesic arccos of the cosine (the "
                                "angle, the distance on the unit sphere)")),
  };
}

// The keys `rcsim equilibria` does not use (KeyDecl::commands): whole sections that belong to
// the block, the measures and the outputs, and single keys of the block and the run.
bool used_by_equilibria(const std::string& key) {
  static const std::vector<std::string> sections = {"dropout.", "mlp.", "metrics.", "weights.mlp", "output."};
  static const std::set<std::string> keys = {
      "dynamics.noise", "model.layer_overrides", "norm.position", "norm.params", "norm.depth_scaling",
      "residual.mlp_alpha", "attention.bias", "run.threads", "run.precision", "weights.redraw_every",
      "weights.across_trials", "weights.shared"};
  if (key == "output.file") return true;  // the one output key it uses
  if (keys.count(key)) return false;
  return std::none_of(sections.begin(), sections.end(),
                      [&](const std::string& s) { return key.compare(0, s.size(), s) == 0; });
}

// `rcsim mask-info` builds the mask alone: its type, window, file and the number of tokens.
bool used_by_mask_info(const std::string& key) { return key.rfind("mask.", 0) == 0 || key == "model.tokens"; }

// The commands of the run vocabulary that use a key (KeyDecl::commands).
std::vector<std::string> commands_using(const std::string& key) {
  std::vector<std::string> out = {"run", "sweep"};
  if (used_by_mask_info(key)) out.push_back("mask-info");
  if (used_by_equilibria(key)) out.push_back("equilibria");
  return out;
}

std::vector<KeyDecl> declare_keys() {
  std::vector<KeyDecl> keys = model_keys();
  for (auto part : {attention_keys(), block_keys(), particle_keys(), dropout_and_mlp_keys(), weight_keys(), input_run_output_keys()})
    keys.insert(keys.end(), part.begin(), part.end());
  for (KeyDecl& k : keys) k.commands = commands_using(k.key);
  return keys;
}

std::string fmt_bound(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

}  // namespace

std::string range_text(const KeyDecl& k) {
  std::string out;
  if (k.min > -kInf) out += (k.min_strict ? " > " : " >= ") + fmt_bound(k.min);
  if (k.max < kInf) out += (out.empty() ? " " : " and ") + std::string(k.max_strict ? "< " : "<= ") + fmt_bound(k.max);
  return out;
}

bool KeyDecl::used_by(const std::string& command) const {
  return std::find(commands.begin(), commands.end(), command) != commands.end();
}

std::string KeyDecl::allowed() const {
  if (!allowed_text.empty()) return allowed_text;
  const std::string a = allows_auto() ? "auto | " : "";
  switch (kind) {
    case KeyKind::text: return "text";
    case KeyKind::file: return "file name" + std::string(default_value.empty() ? " (or empty)" : "");
    case KeyKind::integer: return a + "integer" + range_text(*this);
    case KeyKind::number: return a + "number" + range_text(*this);
    case KeyKind::boolean: return "true | false";
    case KeyKind::seed: return "unsigned 64-bit integer";
    case KeyKind::numbers: return "one number, or d numbers (spaces or commas)";
    case KeyKind::matrix: return "inline matrix, rows separated by ';'";
    case KeyKind::choice: {
      std::string out;
      for (const auto& c : choices) out += (out.empty() ? "" : " | ") + c;
      return out;
    }
  }
  return "";
}

const std::vector<KeyDecl>& config_keys() {
  static const std::vector<KeyDecl> keys = declare_keys();
  return keys;
}

const KeyDecl& sweep_mode_key() {
  static const KeyDecl k = choice("sweep.mode", "product", {"product", "zip"},
                                  "how the lists of a [sweep] section combine: product (every combination) | zip "
                                  "(element by element, lists of one length)");
  return k;
}

bool is_known_key(const std::string& key) {
  const auto& keys = config_keys();
  return std::any_of(keys.begin(), keys.end(), [&](const KeyDecl& k) { return k.key == key; });
}

const KeyDecl& key_decl(const std::string& key) {
  for (const auto& k : config_keys())
    if (k.key == key) return k;
  throw std::logic_error("undeclared configuration key " + key);
}

}  // namespace rcsim
