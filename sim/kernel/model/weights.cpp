#include "kernel/model/weights.hpp"

#include <cmath>

#include "kernel/support/errors.hpp"
#include "kernel/model/bilinear.hpp"
#include "kernel/model/kv_heads.hpp"
#include "kernel/model/parameters.hpp"

namespace rcsim {

namespace {

// Shapes of an array with one `shape` per head (`heads` of them): shape or [L, shape...]; with
// H > 1 [H, shape...] or [L, H, shape...].
std::vector<std::vector<Extent>> head_shapes(const ModelSpec& c, int heads, const Extents& shape) {
  const auto L = static_cast<Extent>(c.model.layers), H = static_cast<Extent>(heads);
  Extents one = shape, per_layer = shape;
  if (H > 1) one.insert(one.begin(), H), per_layer.insert(per_layer.begin(), H);
  per_layer.insert(per_layer.begin(), L);
  return {one, per_layer};
}

// Shapes of a per-layer (or shared) array without a head axis: `shape` or [L, shape...].
std::vector<std::vector<Extent>> layer_shapes(const ModelSpec& c, std::vector<Extent> shape) {
  std::vector<Extent> per_layer = shape;
  per_layer.insert(per_layer.begin(), static_cast<Extent>(c.model.layers));
  return {shape, per_layer};
}

// The block of `layer` in an array of layer_shapes (`size` values per block).
const double* layer_block(const NdArray& a, std::size_t base_rank, int layer, std::size_t size) {
  const std::size_t index = a.shape.size() > base_rank ? static_cast<std::size_t>(layer) : 0;
  return a.data.data() + index * size;
}

// The key of `source` is `file`: the parameter is read from weights.file.
bool from_file(ParameterSource source, const ModelSpec& c) {
  switch (source) {
    case ParameterSource::q: return c.weights.q.type == WeightType::file;
    case ParameterSource::k: return c.weights.k.type == WeightType::file;
    case ParameterSource::v: return c.weights.v.type == WeightType::file;
    case ParameterSource::o: return c.weights.o.type == WeightType::file;
    case ParameterSource::o_or_v:  // b_O comes with W_O's file, or W_V's without model.value_dim
      return (c.model.value_dim > 0 ? c.weights.o.type : c.weights.v.type) == WeightType::file;
    case ParameterSource::mlp: return c.weights.mlp == WeightType::file;
    case ParameterSource::norm: return c.norm.params_from_file;
  }
  return false;
}

// Normalisation slot `slot` (NormSlot) of weights.file: the *_out slots with peri (ngpt) only, the
// MLP's with an MLP; a bias only for the normalisations that have one.
bool norm_slot_in_file(const ModelSpec& c, int slot, bool bias) {
  const bool peri = c.norm.position == NormPosition::peri || c.norm.position == NormPosition::ngpt;
  const bool out_slot = slot == kNormAttnOut || slot == kNormMlpOut;
  return (!out_slot || peri) && (slot < kNormMlp || c.mlp.width > 0) && (!bias || norm_has_bias(c.norm.type));
}

// /norm_attn_gain, /norm_attn_bias, ... (the table's norm_gain and norm_bias, one dataset per slot).
std::string norm_dataset(int slot, const std::string& name) {
  return std::string("norm_") + norm_slot_name(slot) + (name == "norm_bias" ? "_bias" : "_gain");
}

// The keys behind a weight's shape [rows, cols], its head axis and its layer axis, for messages:
// "[d, d_k]: model.dim = 4, model.key_dim = 4; a leading [L, ...] per layer: model.layers = 2".
std::string axes(const ModelSpec& c, const ParameterDims& s, const ParameterInfo& p) {
  const auto named = [&](ParameterAxis a) -> std::pair<std::string, std::string> {
    switch (a) {
      case ParameterAxis::d: return {"d", "model.dim = " + std::to_string(s.d)};
      case ParameterAxis::d_k: return {"d_k", "model.key_dim = " + std::to_string(s.d_k)};
      case ParameterAxis::d_v:
        return {"d_v", (c.model.value_dim > 0 ? "model.value_dim = " : "d_v = model.dim = ") + std::to_string(s.d_v)};
      case ParameterAxis::m: return {"m", "mlp.width = " + std::to_string(s.m)};
      case ParameterAxis::one: break;
    }
    return {"1", "1"};
  };
  const auto rows = named(p.rows), cols = named(p.cols);
  // W_K, W_V with model.kv_heads < model.heads: one per key/value head
  const bool kv = p.pieces == ParameterPieces::kv_heads && s.kv_heads != s.heads;
  return "[" + rows.first + ", " + cols.first + "]: " + rows.second + ", " + cols.second +
         (!kv && s.heads > 1 ? "; [H, ...]: model.heads = " + std::to_string(s.heads) : "") +
         (kv && s.kv_heads > 1 ? "; [H_kv, ...]: model.kv_heads = " + std::to_string(s.kv_heads) : "") +
         "; a leading [L, ...] per layer: model.layers = " + std::to_string(c.model.layers);
}

}  // namespace

std::vector<InputRequirement> input_requirements(const ModelSpec& c, InputArrays& in) {
  std::vector<InputRequirement> req;
  const auto N = static_cast<Extent>(c.model.tokens), d = static_cast<Extent>(c.model.dim),
             T = static_cast<Extent>(c.run.trials);
  if (c.init.type == InitType::file) req.push_back({"init.file", "X0", {{N, d}, {T, N, d}}, &in.x0});
  const ParameterDims dims = parameter_dims(c);
  // One loop over the parameters' table (kernel/model/parameters.hpp): each one weights.file holds.
  for (const ParameterInfo& p : parameter_table()) {
    const int pieces = piece_count(p, dims);
    if (pieces == 0 || !from_file(p.source, c)) continue;
    const auto rows = static_cast<Extent>(axis_extent(p.rows, dims));
    const auto cols = static_cast<Extent>(axis_extent(p.cols, dims));
    const Extents shape = p.rows == ParameterAxis::one ? Extents{cols} : Extents{rows, cols};
    if (p.pieces == ParameterPieces::heads || p.pieces == ParameterPieces::kv_heads) {
      req.push_back({"weights.file", p.name, head_shapes(c, pieces, shape), p.input(in, 0),
                     p.rows == ParameterAxis::one ? "" : axes(c, dims, p)});
      continue;
    }
    if (p.pieces == ParameterPieces::one) {
      req.push_back({"weights.file", p.name, layer_shapes(c, shape), p.input(in, 0)});
      continue;
    }
    for (int slot = 0; slot < pieces; ++slot)  // norm.params = file: one dataset per slot the block uses
      if (norm_slot_in_file(c, slot, p.name == std::string("norm_bias")))
        req.push_back({"weights.file", norm_dataset(slot, p.name), layer_shapes(c, shape), p.input(in, slot)});
  }
  if (c.attention.logit_bias.kind == LogitBiasKind::file)
    req.push_back({"weights.file", "logit_bias", head_shapes(c, c.model.heads, {N, N}), &in.logit_bias});
  return req;
}

std::string shape_string(const Extents& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void check_input_shape(const InputRequirement& r, const std::string& source, const NdArray& a) {
  for (const auto& shape : r.shapes)
    if (a.shape == shape) return;
  std::string want;
  for (std::size_t i = 0; i < r.shapes.size(); ++i) want += (i ? " or " : "") + shape_string(r.shapes[i]);
  throw UsageError(std::string(r.key) + " '" + source + "': dataset /" + r.dataset + " has shape " +
                   shape_string(a.shape) + ", expected " + want + (r.axes.empty() ? "" : " (" + r.axes + ")"));
}

void check_input_finite(const InputRequirement& r, const std::string& source, const NdArray& a) {
  for (std::size_t i = 0; i < a.data.size(); ++i)
    if (!std::isfinite(a.data[i]))
      throw UsageError(std::string(r.key) + " '" + source + "': dataset /" + r.dataset + " holds a non-finite value (" +
                       std::to_string(a.data[i]) + " at flat index " + std::to_string(i) +
                       "); inputs must be finite numbers");
}

void cast_weights(const LayerWeights& w, LayerWeightsT<float>& out) {
  const auto cast_all = [](const std::vector<Matrix>& from, std::vector<MatrixF>& to) {
    to.resize(from.size());
    for (std::size_t i = 0; i < from.size(); ++i) to[i] = from[i].cast<float>();
  };
  cast_all(w.q, out.q);
  cast_all(w.k, out.k);
  cast_all(w.v, out.v);
  cast_all(w.o, out.o);
  cast_all(w.logits, out.logits);
  cast_all(w.logit_bias, out.logit_bias);
  const auto cast_rows = [](const std::vector<RowVector>& from, std::vector<RowVectorT<float>>& to) {
    to.resize(from.size());
    for (std::size_t i = 0; i < from.size(); ++i) to[i] = from[i].cast<float>();
  };
  cast_rows(w.q_bias, out.q_bias);
  cast_rows(w.k_bias, out.k_bias);
  cast_rows(w.v_bias, out.v_bias);
  out.o_bias = w.o_bias.cast<float>();
  out.mlp_in = w.mlp_in.cast<float>();
  out.mlp_out = w.mlp_out.cast<float>();
  out.mlp_in_bias = w.mlp_in_bias.cast<float>();
  out.mlp_out_bias = w.mlp_out_bias.cast<float>();
  out.mlp_gate = w.mlp_gate.cast<float>();
  out.norms_from_file = w.norms_from_file;
  out.kv_group = w.kv_group;
  for (int i = 0; i < 4; ++i) out.norms[i] = w.norms[i];
}

const char* norm_slot_name(int slot) {
  static const char* names[] = {"attn", "attn_out", "mlp", "mlp_out"};
  return names[slot];
}

WeightSampler::WeightSampler(const ModelSpec& c, const InputArrays& files) : c_(c), files_(files) {
  const auto H = static_cast<std::size_t>(c.model.heads);
  const int d = c.model.dim, dv = c.model.value_dim, m = c.mlp.width;
  current_.q.assign(H, Matrix(d, c.model.key_dim));
  current_.k.assign(H, Matrix(d, c.model.key_dim));
  current_.v.assign(H, Matrix(d, dv > 0 ? dv : d));
  current_.kv_group = c.model.kv_group();
  if (dv > 0) current_.o.assign(H, Matrix(dv, d));
  if (c.attention.kind == AttentionKind::random_markov) current_.logits.assign(H, Matrix(c.model.tokens, c.model.tokens));
  if (c.attention.logit_bias.kind == LogitBiasKind::file) {
    if (!files.logit_bias)  // the hosts check their inputs (io/inputs.cpp, host_arrays.cpp); a kernel guard
      throw UsageError("attention.logit_bias = file: no /logit_bias array was given (weights.file or weights={'logit_bias': B})");
    current_.logit_bias.assign(H, Matrix(c.model.tokens, c.model.tokens));
  }
  if (m > 0) {
    current_.mlp_in.resize(d, m);
    current_.mlp_out.resize(m, d);
    if (c.mlp.activation == MlpActivation::swiglu) current_.mlp_gate.resize(d, m);
    if (c.mlp.bias) {
      current_.mlp_in_bias.setZero(m);
      current_.mlp_out_bias.setZero(d);
    }
  }
  if (c.attention_bias) {
    current_.q_bias.assign(H, RowVector::Zero(c.model.key_dim));
    current_.k_bias.assign(H, RowVector::Zero(c.model.key_dim));
    current_.v_bias.assign(H, RowVector::Zero(dv > 0 ? dv : d));
    current_.o_bias.setZero(d);
  }
  if (c.norm.params_from_file) {
    current_.norms_from_file = true;
    for (auto& n : current_.norms) n = Normalization::from_config(c);
  }
}

void WeightSampler::begin_trial(RandomStream& rng) {
  if (c_.weights.shared_across_trials) own_.emplace(c_.run.seed, 0, 2);
  if (c_.weights.shared) draw(0, source(rng), current_);
}

const LayerWeights& WeightSampler::layer(int layer, RandomStream& rng) {
  if (!c_.weights.shared && layer % c_.weights.redraw_every == 0) draw(layer, source(rng), current_);
  return current_;
}

void WeightSampler::draw(int layer, RandomStream& rng, LayerWeights& out) const {
  const int H = c_.model.heads, d = c_.model.dim, dv = c_.model.value_dim;
  if (c_.weights.qk != BilinearType::none) {
    for (int h = 0; h < H; ++h) {
      draw_bilinear(c_.weights.qk, c_.model.dim, rng, out.q[static_cast<std::size_t>(h)]);
      out.k[static_cast<std::size_t>(h)].setIdentity(c_.model.dim, c_.model.dim);
    }
  } else {
    for (int h = 0; h < H; ++h)
      draw_one(c_.weights.q, files_.w_q, layer, h, d, c_.model.key_dim, rng, out.q[static_cast<std::size_t>(h)]);
    for (int h = 0; h < H; ++h)
      draw_one(c_.weights.k, files_.w_k, layer, h, d, c_.model.key_dim, rng, out.k[static_cast<std::size_t>(h)],
               out.kv_group);
  }
  for (int h = 0; h < H; ++h) {
    const auto i = static_cast<std::size_t>(h);
    if (c_.weights.v.type == WeightType::tied_qk)
      out.v[i].noalias() = c_.weights.v_sign * out.q[i] * out.k[i].transpose();
    else
      draw_one(c_.weights.v, files_.w_v, layer, h, d, dv > 0 ? dv : d, rng, out.v[i], out.kv_group);
  }
  if (dv > 0)
    for (int h = 0; h < H; ++h) draw_one(c_.weights.o, files_.w_o, layer, h, dv, d, rng, out.o[static_cast<std::size_t>(h)]);
  if (c_.mlp.width > 0) draw_mlp(layer, rng, out);
  for (Matrix& G : out.logits) rng.fill_normal(G);  // random_markov: after every other draw of the layer
  if (c_.weights.branch_gain != 1.0) {  // DeepNorm's beta (docs/science/gradients.md): the branch weights
    const double g = c_.weights.branch_gain;
    for (auto& m : out.v) m *= g;
    for (auto& m : out.o) m *= g;
    out.mlp_in *= g;
    out.mlp_out *= g;
    out.mlp_gate *= g;  // swiglu: the gate is a branch weight too (GLM-130B scales its fused W_in, W_gate)
  }
  if (c_.norm.params_from_file) load_norms(layer, out);
  if (c_.attention_bias) load_attention_biases(layer, out);
  if (files_.logit_bias) {  // attention.logit_bias = file: read, not drawn (no draw from rng)
    WeightSpec from_file;
    from_file.type = WeightType::file;
    for (int h = 0; h < H; ++h)
      draw_one(from_file, files_.logit_bias, layer, h, c_.model.tokens, c_.model.tokens, rng,
               out.logit_bias[static_cast<std::size_t>(h)]);
  }
  share_kv_heads(out, out.kv_group);  // model.kv_heads: each group's heads copy its first head's W_K, W_V, b_K, b_V
}

void WeightSampler::load_attention_biases(int layer, LayerWeights& out) const {
  const int H = c_.model.heads;
  // Head h of `layer` in an array of shape [n], [L, n] (H = 1) or [H, n], [L, H, n]; b_K, b_V
  // (group = model.kv_heads' group) hold H / group heads, query head h reading h / group.
  const auto load = [&](const std::optional<NdArray>& a, std::vector<RowVector>& b, int group) {
    if (!a) return;  // zero
    const int heads = H / group;
    const std::size_t base = heads == 1 ? 1 : 2;
    for (int h = 0; h < H; ++h) {
      auto& v = b[static_cast<std::size_t>(h)];
      const auto n = static_cast<std::size_t>(v.size());
      const double* block = layer_block(*a, base, layer, n * static_cast<std::size_t>(heads));
      v = Eigen::Map<const RowVector>(block + static_cast<std::size_t>(kv_head_of(h, group)) * n, v.size());
    }
  };
  load(files_.b_q, out.q_bias, 1);
  load(files_.b_k, out.k_bias, out.kv_group);
  load(files_.b_v, out.v_bias, out.kv_group);
  if (files_.b_o)
    out.o_bias = Eigen::Map<const RowVector>(
        layer_block(*files_.b_o, 1, layer, static_cast<std::size_t>(c_.model.dim)), c_.model.dim);
}

void WeightSampler::draw_mlp(int layer, RandomStream& rng, LayerWeights& out) const {
  const int d = c_.model.dim, m = c_.mlp.width;
  const bool bias = c_.mlp.bias, gated = c_.mlp.activation == MlpActivation::swiglu;
  switch (c_.weights.mlp) {
    case WeightType::file: {
      const auto md = static_cast<std::size_t>(d) * static_cast<std::size_t>(m);
      out.mlp_in = Eigen::Map<const RowMajorMatrix>(layer_block(*files_.w_in, 2, layer, md), d, m);
      out.mlp_out = Eigen::Map<const RowMajorMatrix>(layer_block(*files_.w_out, 2, layer, md), m, d);
      if (gated) out.mlp_gate = Eigen::Map<const RowMajorMatrix>(layer_block(*files_.w_gate, 2, layer, md), d, m);
      if (bias) {
        out.mlp_in_bias = Eigen::Map<const RowVector>(layer_block(*files_.b_in, 1, layer, static_cast<std::size_t>(m)), m);
        out.mlp_out_bias = Eigen::Map<const RowVector>(layer_block(*files_.b_out, 1, layer, static_cast<std::size_t>(d)), d);
      }
      return;
    }
    case WeightType::zero:
      out.mlp_in.setZero();
      out.mlp_out.setZero();
      out.mlp_gate.setZero();
      return;  // biases stay zero
    default: {
      // W_in, (W_gate,) b_in, W_out, b_out in this order; a bias of std 0 is zero and draws nothing;
      // swiglu's W_gate with W_in's std, drawn by no other activation (their draws unchanged).
      const auto draw_bias = [&](RowVector& b, double std) {
        if (std <= 0.0) return;
        Matrix row(1, b.size());
        rng.fill_normal(row, std);
        b = row.row(0);
      };
      rng.fill_normal(out.mlp_in, c_.weights.mlp_in_std);
      if (gated) rng.fill_normal(out.mlp_gate, c_.weights.mlp_in_std);
      if (bias) draw_bias(out.mlp_in_bias, c_.weights.mlp_in_bias_std);
      rng.fill_normal(out.mlp_out, c_.weights.mlp_out_std);
      if (bias) draw_bias(out.mlp_out_bias, c_.weights.mlp_out_bias_std);
      return;
    }
  }
}

void WeightSampler::load_norms(int layer, LayerWeights& out) const {
  const auto d = static_cast<std::size_t>(c_.model.dim);
  for (int slot = 0; slot < 4; ++slot) {
    if (files_.norm_gain[slot])
      out.norms[slot].gain = Eigen::Map<const RowVector>(layer_block(*files_.norm_gain[slot], 1, layer, d), c_.model.dim);
    if (files_.norm_bias[slot])
      out.norms[slot].bias = Eigen::Map<const RowVector>(layer_block(*files_.norm_bias[slot], 1, layer, d), c_.model.dim);
  }
}

void WeightSampler::draw_one(const WeightSpec& spec, const std::optional<NdArray>& file, int layer,
                             int head, int rows, int cols, RandomStream& rng, Matrix& out, int group) const {
  const int d = c_.model.dim;
  switch (spec.type) {
    case WeightType::gaussian: rng.fill_normal(out, spec.std); return;
    case WeightType::orthogonal: out = rng.haar_orthogonal(rows, cols); return;
    case WeightType::identity: out.setIdentity(); return;
    case WeightType::zero: out.setZero(); return;
    case WeightType::fixed: out = spec.matrix; return;
    case WeightType::wishart: draw_wishart(d, rng, out); return;
    case WeightType::tied_qk: return;  // set in draw() from W_Q and W_K
    case WeightType::file: {
      const NdArray& a = *file;
      const std::size_t block = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
      const int heads = c_.model.heads / group;  // W_K, W_V: H_kv heads, query head `head` reads head / group
      const bool per_layer = a.shape.size() == (heads == 1 ? 3u : 4u);
      std::size_t index = static_cast<std::size_t>(kv_head_of(head, group));
      if (per_layer) index += static_cast<std::size_t>(layer) * static_cast<std::size_t>(heads);
      out = Eigen::Map<const RowMajorMatrix>(a.data.data() + index * block, rows, cols);
      return;
    }
  }
}

namespace {

// Initial conditions of the particle literature (docs/science/particles.md), X(0) N x d.
//   circle:      x_j = (cos theta_j, sin theta_j, 0, ...), theta_j = 2 pi j / N (equally spaced)
//   equiangular: X = G^(1/2) O, G = (1 - rho) I + rho 1 1^T (so <x_i, x_j> = rho, |x_i| = 1),
//                O (N x d) Haar with orthonormal rows (needs N <= d)
//   isometric:   X = O, so X X^T = I (equiangular with rho = 0; needs N <= d)
Matrix particle_tokens(const ModelSpec& c, RandomStream& rng) {
  const int N = c.model.tokens, d = c.model.dim;
  Matrix X = Matrix::Zero(N, d);
  if (c.init.type == InitType::circle) {
    const double pi = 3.14159265358979323846;
    for (int j = 0; j < N; ++j) {
      const double theta = 2.0 * pi * j / N;
      X(j, 0) = std::cos(theta);
      X(j, 1) = std::sin(theta);
    }
    return X;
  }
  const Matrix O = rng.haar_orthogonal(N, d);  // orthonormal rows (N <= d)
  if (c.init.type == InitType::isometric) return O;
  const double rho = c.init.rho;
  const Matrix G = (1.0 - rho) * Matrix::Identity(N, N) + rho * Matrix::Ones(N, N);
  const Eigen::SelfAdjointEigenSolver<Matrix> eig(G);
  const Vector root = eig.eigenvalues().cwiseMax(0.0).cwiseSqrt();  // G^(1/2) = U diag(sqrt(lambda)) U^T
  return eig.eigenvectors() * root.asDiagonal() * eig.eigenvectors().transpose() * O;
}

}  // namespace

Matrix initial_tokens(const ModelSpec& c, const InputArrays& files, int trial, RandomStream& rng) {
  const int N = c.model.tokens, d = c.model.dim;
  Matrix X(N, d);
  switch (c.init.type) {
    case InitType::gaussian: rng.fill_normal(X); break;
    case InitType::sphere:
    case InitType::positive:
      rng.fill_normal(X);
      if (c.init.type == InitType::positive) X = X.cwiseAbs();
      for (int i = 0; i < N; ++i) X.row(i).normalize();
      break;
    case InitType::fixed: X = c.init.matrix; break;
    case InitType::uniform:
      for (int i = 0; i < N; ++i)
        for (int j = 0; j < d; ++j) X(i, j) = 2.0 * rng.uniform() - 1.0;
      break;
    case InitType::circle:  // particles (docs/science/particles.md)
    case InitType::equiangular:
    case InitType::isometric: X = particle_tokens(c, rng); break;
    case InitType::file: {
      const NdArray& a = *files.x0;
      const std::size_t block = static_cast<std::size_t>(N) * static_cast<std::size_t>(d);
      const std::size_t index = a.shape.size() == 3 ? static_cast<std::size_t>(trial) : 0;
      X = Eigen::Map<const RowMajorMatrix>(a.data.data() + index * block, N, d);
      break;
    }
  }
  return X;
}

}  // namespace rcsim
