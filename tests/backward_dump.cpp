// Test helper of tests/reference/autograd_check.py: draws a small stack of blocks (weights, X(0)
// and a cotangent C from a seed), runs rcsim's forward and reverse pass (kernel/block/gradients.hpp) for
// the loss L = sum(C .* X(L)) and writes the inputs and the gradients as text arrays:
//   NAME ROWS COLS
//   values, row by row (17 significant digits)
// Usage: backward_dump OUT key=value ...  (keys below, with their defaults).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>

#include "kernel/block/block.hpp"
#include "kernel/block/gradients.hpp"
#include "kernel/model/kv_heads.hpp"
#include "kernel/ops/noise.hpp"
#include "kernel/model/random.hpp"
#include "kernel/model/parameters.hpp"
#include "backward_masks.hpp"

using namespace rcsim;

namespace {

std::map<std::string, std::string> options(int argc, char** argv) {
  std::map<std::string, std::string> o = {
      {"N", "5"},   {"d", "4"},      {"dk", "3"},     {"H", "2"},          {"dv", "0"},         {"m", "0"},
      {"L", "3"},   {"seed", "1"},   {"norm", "layernorm"}, {"pos", "pre"}, {"alpha", "0.7"}, {"dqk", "2"},
      {"act", "gelu"}, {"usa", "0"}, {"softpick", "0"}, {"head_mean", "0"}, {"mask", "complete"}, {"bias", "1"},
      // variants (docs/science/gradients.md): skip gain, shaped attention
      {"skip", "1"}, {"shape_a", "1"}, {"shape_b", "0"}, {"shape_c", "0"},
      // additive logit biases (attention.logit_bias = none | alibi | decay, attention.decay = gamma)
      {"logit_bias", "none"}, {"decay", "1"},
      // QK-normalisation (attention.qk_norm, attention.qk_scale)
      {"qk_norm", "0"}, {"qk_scale", "1"},
      // LayerNorm scaling 1/sqrt(l) of pre-LN (norm.depth_scaling = inv_sqrt_layer)
      {"ln_scale", "0"},
      // attention.bias: b_Q, b_K, b_V per head and b_O (drawn after the other weights of a layer)
      {"attn_bias", "0"},
      // settings per layer range (model.layer_overrides): blocks 0..mix_to (-1: none) with these
      {"mix_to", "-1"}, {"mix_pos", "post"}, {"mix_alpha", "0.7"}, {"mix_dqk", "2"}, {"mix_act", "gelu"},
      // particles and peers: random-Markov logits G_h (markov.T.H, drawn after a layer's other weights),
      // the tangent projection, the RK4 step, the noise step P(X + noise.T) after each block (noise =
      // sigma sqrt(dt), noise_norm = none | sphere; the draws from the stream (seed, 0, 14))
      {"markov", "0"}, {"tangent", "0"}, {"rk4", "0"}, {"noise", "0"}, {"noise_norm", "sphere"},
      // grouped-query attention (model.kv_heads): kv key/value heads (0: H), query head h reading h / (H / kv)
      {"kv", "0"}};
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    if (eq == std::string::npos || !o.count(a.substr(0, eq))) {
      std::cerr << "backward_dump: bad option " << a << "\n";
      std::exit(2);
    }
    o[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return o;
}

NormType norm_type(const std::string& s) {
  if (s == "none") return NormType::none;
  if (s == "sphere") return NormType::sphere;
  if (s == "projection") return NormType::projection;
  if (s == "rmsnorm") return NormType::rmsnorm;
  return NormType::layernorm;
}
NormPosition position(const std::string& s) {
  if (s == "post") return NormPosition::post;
  if (s == "peri") return NormPosition::peri;
  if (s == "ngpt") return NormPosition::ngpt;
  return NormPosition::pre;
}
MlpActivation activation(const std::string& s) {
  if (s == "relu") return MlpActivation::relu;
  if (s == "gelu_tanh") return MlpActivation::gelu_tanh;
  if (s == "tanh") return MlpActivation::tanh;
  if (s == "swiglu") return MlpActivation::swiglu;
  return MlpActivation::gelu;
}


Matrix gaussian(Eigen::Index r, Eigen::Index c, RandomStream& rng, double std) {
  Matrix m(r, c);
  rng.fill_normal(m, std);
  return m;
}

void put(std::ostream& out, const std::string& name, const Matrix& m) {
  out << name << ' ' << m.rows() << ' ' << m.cols() << '\n';
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    for (Eigen::Index j = 0; j < m.cols(); ++j) out << (j ? " " : "") << m(i, j);
    out << '\n';
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: backward_dump OUT key=value ...\n";
    return 2;
  }
  auto o = options(argc, argv);
  const int N = std::stoi(o["N"]), d = std::stoi(o["d"]), dk = std::stoi(o["dk"]), H = std::stoi(o["H"]);
  const int dv = std::stoi(o["dv"]), m = std::stoi(o["m"]), L = std::stoi(o["L"]);
  const bool bias = o["bias"] == "1", attn_bias = o["attn_bias"] == "1";
  const int group = std::stoi(o["kv"]) > 0 ? H / std::stoi(o["kv"]) : 1;  // query heads per key/value head
  RandomStream rng(std::stoull(o["seed"]), 0);
  const MaskMatrix mask = backward_test_mask(o["mask"], N);
  static const Normalization unused;
  BlockParams p;
  p.layer = LayerParams{&mask, std::stod(o["dqk"]), std::stod(o["alpha"]), &unused};
  if (o["usa"] == "1") p.layer.attention.kind = AttentionKind::usa;
  if (o["softpick"] == "1") p.layer.attention.kind = AttentionKind::softpick;
  p.layer.head_mean = o["head_mean"] == "1";
  p.layer.skip = std::stod(o["skip"]);
  p.layer.attention.shape = AttentionShape{std::stod(o["shape_a"]), std::stod(o["shape_b"]), std::stod(o["shape_c"])};
  p.layer.attention.logit_bias.kind = o["logit_bias"] == "alibi"   ? LogitBiasKind::alibi
                            : o["logit_bias"] == "decay" ? LogitBiasKind::decay
                                                         : LogitBiasKind::none;
  p.layer.attention.logit_bias.gamma = std::stod(o["decay"]);
  p.layer.attention.qk_norm = o["qk_norm"] == "1";
  p.layer.attention.qk_scale = std::stod(o["qk_scale"]);
  if (o["markov"] == "1") p.layer.attention.kind = AttentionKind::random_markov;
  if (o["tangent"] == "1") p.layer.project = ResidualProject::tangent;
  if (o["rk4"] == "1") p.layer.integrator = Integrator::rk4;
  const double noise = std::stod(o["noise"]);
  const Normalization noise_norm(norm_type(o["noise_norm"]), d, 0.0);
  const NoiseStep noise_step{noise, &noise_norm, nullptr};
  if (noise > 0.0) p.noise = &noise_step;
  p.norm_depth_scaling = o["ln_scale"] == "1";
  p.position = position(o["pos"]);
  p.activation = activation(o["act"]);
  // model.layer_overrides: blocks 0..mix_to with these settings, the others as p (the table that
  // layer_settings builds from the range's configuration; the normalisations are the file's, per slot)
  LayerSettings per_layer;
  if (std::stoi(o["mix_to"]) >= 0) {
    LayerSetting s;
    s.from = 0, s.to = std::stoi(o["mix_to"]);
    s.params = p;
    s.params.position = position(o["mix_pos"]);
    s.params.layer.alpha = std::stod(o["mix_alpha"]);
    s.params.layer.d_qk = std::stod(o["mix_dqk"]);
    s.params.activation = activation(o["mix_act"]);
    ModelSpec spec;
    spec.model.dim = d;
    spec.norm.type = norm_type(o["norm"]);
    s.norm = Normalization::from_config(spec);
    per_layer.push_back(std::move(s));
  }
  if (!per_layer.empty()) p.per_layer = &per_layer;
  std::vector<LayerWeights> ws(static_cast<std::size_t>(L));
  for (auto& w : ws) {
    for (int h = 0; h < H; ++h) {
      w.q.push_back(gaussian(d, dk, rng, 0.8));
      w.k.push_back(gaussian(d, dk, rng, 0.8));
      w.v.push_back(gaussian(d, dv > 0 ? dv : d, rng, 0.6));
      if (dv > 0) w.o.push_back(gaussian(dv, d, rng, 0.6));
    }
    if (m > 0) {
      w.mlp_in = gaussian(d, m, rng, 0.7);
      if (p.activation == MlpActivation::swiglu) w.mlp_gate = gaussian(d, m, rng, 0.7);  // swiglu only
      w.mlp_out = gaussian(m, d, rng, 0.5);
      if (bias) {
        w.mlp_in_bias = gaussian(1, m, rng, 0.3);
        w.mlp_out_bias = gaussian(1, d, rng, 0.3);
      }
    }
    w.norms_from_file = true;  // per-slot gains and biases
    for (int s = 0; s < 4; ++s) {
      w.norms[s] = Normalization(norm_type(o["norm"]), d, 1e-5);
      w.norms[s].gain = RowVector::Ones(d) + gaussian(1, d, rng, 0.3);
      w.norms[s].bias = gaussian(1, d, rng, 0.3);
    }
    if (attn_bias) {
      for (int h = 0; h < H; ++h) {
        w.q_bias.push_back(gaussian(1, dk, rng, 0.5));
        w.k_bias.push_back(gaussian(1, dk, rng, 0.5));
        w.v_bias.push_back(gaussian(1, dv > 0 ? dv : d, rng, 0.5));
      }
      w.o_bias = gaussian(1, d, rng, 0.5);
    }
    if (p.layer.random_markov())
      for (int h = 0; h < H; ++h) w.logits.push_back(gaussian(N, N, rng, 1.0));
    share_kv_heads(w, group);  // the heads of a group copy its first head's W_K, W_V, b_K, b_V
  }
  const Matrix X0 = gaussian(N, d, rng, 1.0), C = gaussian(N, d, rng, 1.0);
  BlockTape tape;
  tape.weights = ws;
  std::vector<Matrix> noises;  // noise * G_t, the draws added after block t
  RandomStream z(std::stoull(o["seed"]), 0, 14);
  Matrix X = X0, next;
  BlockWorkspace bws(N, d, dk);
  for (int t = 0; t < L; ++t) {
    tape.inputs.push_back(X);
    transformer_block(X, ws[static_cast<std::size_t>(t)], at_layer(p, t), bws, next);
    if (noise > 0.0) {
      tape.noise.push_back(z);
      RandomStream copy = z;
      Matrix G(N, d);
      copy.fill_normal(G);
      noises.push_back(noise * G);
      apply_dynamics_noise(next, noise, z, noise_norm);
    }
    X = next;
  }
  std::ofstream out(argv[1]);
  out << std::setprecision(17);
  Matrix maskd = mask.cast<double>();
  put(out, "mask", maskd);
  put(out, "X0", X0);
  put(out, "C", C);
  put(out, "XL", X);
  for (int t = 0; t < L; ++t) {
    const auto& w = ws[static_cast<std::size_t>(t)];
    const std::string pre = "l" + std::to_string(t) + ".";
    for (int h = 0; h < H; ++h) {
      put(out, pre + "q" + std::to_string(h), w.q[h]);
      if (dv > 0) put(out, pre + "o" + std::to_string(h), w.o[h]);
      if (attn_bias) put(out, pre + "bq" + std::to_string(h), w.q_bias[h]);
      if (h % group) continue;  // key/value head h / group: written once
      put(out, pre + "k" + std::to_string(h / group), w.k[h]);
      put(out, pre + "v" + std::to_string(h / group), w.v[h]);
      if (attn_bias) {
        put(out, pre + "bk" + std::to_string(h / group), w.k_bias[h]);
        put(out, pre + "bv" + std::to_string(h / group), w.v_bias[h]);
      }
    }
    if (attn_bias) put(out, pre + "bo", w.o_bias);
    if (m > 0) {
      put(out, pre + "w_in", w.mlp_in);
      put(out, pre + "w_out", w.mlp_out);
      if (w.mlp_gate.size() > 0) put(out, pre + "w_gate", w.mlp_gate);
      if (bias) {
        put(out, pre + "b_in", w.mlp_in_bias);
        put(out, pre + "b_out", w.mlp_out_bias);
      }
    }
    for (int s = 0; s < 4; ++s) {
      put(out, pre + "gain" + std::to_string(s), w.norms[s].gain);
      put(out, pre + "bias" + std::to_string(s), w.norms[s].bias);
    }
    for (int h = 0; h < static_cast<int>(w.logits.size()); ++h)
      put(out, "markov." + std::to_string(t) + "." + std::to_string(h), w.logits[static_cast<std::size_t>(h)]);
    if (noise > 0.0) put(out, "noise." + std::to_string(t), noises[static_cast<std::size_t>(t)]);
  }
  // The gradients by the weights' names above (autograd_check.py compares grad.NAME with NAME's
  // autograd): one loop over the parameters' table (kernel/model/parameters.hpp), the head or slot
  // after the stem of a list.
  const std::map<std::string, std::string> stem = {
      {"W_Q", "q"},  {"W_K", "k"},  {"W_V", "v"},  {"W_O", "o"},  {"b_Q", "bq"},           {"b_K", "bk"},
      {"b_V", "bv"}, {"b_O", "bo"}, {"W_in", "w_in"}, {"W_gate", "w_gate"}, {"W_out", "w_out"}, {"b_in", "b_in"}, {"b_out", "b_out"},
      {"norm_gain", "gain"}, {"norm_bias", "bias"}};
  const auto on_block = [&](int t, const BlockGrads& g) {
    const std::string pre = "grad.l" + std::to_string(t) + ".";
    for_each_parameter(
        [&](const ParameterInfo& param, const auto& member) {
          for (std::size_t i = 0; i < pieces_of(member); ++i)
            if (piece(member, i).size() > 0)
              put(out, pre + stem.at(param.name) + (param.pieces == ParameterPieces::one ? "" : std::to_string(i)),
                  Matrix(piece(member, i)));
        },
        g);
  };
  const Matrix dX0 = stack_backward_segments(
      L, L, [&](int, int, BlockTape& seg) { seg = tape; }, p, C, [](int, const Matrix&) {}, on_block);
  put(out, "grad.X0", dX0);
  return out.good() ? 0 : 1;
}
