#include "model/inputs.hpp"

#include <cmath>

#include "core/errors.hpp"
#include "model/bilinear.hpp"

namespace rcsim {

namespace {

// Read `name` from `file` and check that its shape is one of `allowed`.
h5::Array load_checked(const std::string& key, const std::string& filename, const std::string& name,
                       const std::vector<std::vector<hsize_t>>& allowed) {
  const h5::File f = h5::File::open_read(filename, key);
  h5::Array a = f.read(name);
  for (const auto& shape : allowed)
    if (a.shape == shape) return a;
  std::string want;
  for (std::size_t i = 0; i < allowed.size(); ++i) want += (i ? " or " : "") + h5::shape_string(allowed[i]);
  throw UsageError(key + " '" + filename + "': dataset /" + name + " has shape " + h5::shape_string(a.shape) +
                   ", expected " + want);
}

std::vector<std::vector<hsize_t>> weight_shapes(const Config& c, hsize_t cols) {
  const auto d = static_cast<hsize_t>(c.model.dim), L = static_cast<hsize_t>(c.model.layers),
             H = static_cast<hsize_t>(c.model.heads);
  if (H == 1) return {{d, cols}, {L, d, cols}};
  return {{H, d, cols}, {L, H, d, cols}};
}

}  // namespace

InputFiles InputFiles::load(const Config& c) {
  InputFiles in;
  const auto N = static_cast<hsize_t>(c.model.tokens), d = static_cast<hsize_t>(c.model.dim),
             T = static_cast<hsize_t>(c.run.trials), dk = static_cast<hsize_t>(c.model.key_dim);
  if (c.init.type == InitType::file) in.x0 = load_checked("init.file", c.init.file, "X0", {{N, d}, {T, N, d}});
  if (c.weights.q.type == WeightType::file)
    in.w_q = load_checked("weights.file", c.weights.file, "W_Q", weight_shapes(c, dk));
  if (c.weights.k.type == WeightType::file)
    in.w_k = load_checked("weights.file", c.weights.file, "W_K", weight_shapes(c, dk));
  if (c.weights.v.type == WeightType::file)
    in.w_v = load_checked("weights.file", c.weights.file, "W_V", weight_shapes(c, d));
  for (const auto* a : {&in.x0, &in.w_q, &in.w_k, &in.w_v})
    if (*a)
      for (double x : (*a)->data)
        if (!std::isfinite(x)) throw UsageError("input file: a dataset contains a non-finite value");
  return in;
}

WeightSampler::WeightSampler(const Config& c, const InputFiles& files) : c_(c), files_(files) {
  const auto H = static_cast<std::size_t>(c.model.heads);
  current_.q.assign(H, Matrix(c.model.dim, c.model.key_dim));
  current_.k.assign(H, Matrix(c.model.dim, c.model.key_dim));
  current_.v.assign(H, Matrix(c.model.dim, c.model.dim));
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
  const int H = c_.model.heads;
  if (c_.weights.qk != BilinearType::none) {
    for (int h = 0; h < H; ++h) {
      draw_bilinear(c_.weights.qk, c_.model.dim, rng, out.q[static_cast<std::size_t>(h)]);
      out.k[static_cast<std::size_t>(h)].setIdentity(c_.model.dim, c_.model.dim);
    }
  } else {
    for (int h = 0; h < H; ++h)
      draw_one(c_.weights.q, files_.w_q, layer, h, c_.model.key_dim, rng, out.q[static_cast<std::size_t>(h)]);
    for (int h = 0; h < H; ++h)
      draw_one(c_.weights.k, files_.w_k, layer, h, c_.model.key_dim, rng, out.k[static_cast<std::size_t>(h)]);
  }
  for (int h = 0; h < H; ++h) {
    const auto i = static_cast<std::size_t>(h);
    if (c_.weights.v.type == WeightType::tied_qk)
      out.v[i].noalias() = c_.weights.v_sign * out.q[i] * out.k[i].transpose();
    else
      draw_one(c_.weights.v, files_.w_v, layer, h, c_.model.dim, rng, out.v[i]);
  }
}

void WeightSampler::draw_one(const WeightSpec& spec, const std::optional<h5::Array>& file, int layer,
                             int head, int cols, RandomStream& rng, Matrix& out) const {
  const int d = c_.model.dim;
  switch (spec.type) {
    case WeightType::gaussian: rng.fill_normal(out, spec.std); return;
    case WeightType::orthogonal: out = rng.haar_orthogonal(d, cols); return;
    case WeightType::identity: out.setIdentity(); return;
    case WeightType::zero: out.setZero(); return;
    case WeightType::fixed: out = spec.matrix; return;
    case WeightType::wishart: draw_wishart(d, rng, out); return;
    case WeightType::tied_qk: return;  // set in draw() from W_Q and W_K
    case WeightType::file: {
      const h5::Array& a = *file;
      const std::size_t block = static_cast<std::size_t>(d) * static_cast<std::size_t>(cols);
      const bool per_layer = a.shape.size() == (c_.model.heads == 1 ? 3u : 4u);
      std::size_t index = static_cast<std::size_t>(head);
      if (per_layer) index += static_cast<std::size_t>(layer) * static_cast<std::size_t>(c_.model.heads);
      out = Eigen::Map<const RowMajorMatrix>(a.data.data() + index * block, d, cols);
      return;
    }
  }
}

Matrix initial_tokens(const Config& c, const InputFiles& files, int trial, RandomStream& rng) {
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
    case InitType::file: {
      const h5::Array& a = *files.x0;
      const std::size_t block = static_cast<std::size_t>(N) * static_cast<std::size_t>(d);
      const std::size_t index = a.shape.size() == 3 ? static_cast<std::size_t>(trial) : 0;
      X = Eigen::Map<const RowMajorMatrix>(a.data.data() + index * block, N, d);
      break;
    }
  }
  return X;
}

}  // namespace rcsim
