#include "kernel/block/gradients.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "kernel/model/random.hpp"

namespace rcsim {

Vector readout(const ModelSpec& c, int trial) {
  const std::vector<double>& given = c.metrics.readout_vector;  // metrics.readout_vector: R as given
  if (!given.empty()) return Eigen::Map<const Vector>(given.data(), static_cast<Eigen::Index>(given.size()));
  RandomStream rng(c.run.seed, static_cast<std::uint64_t>(trial), kReadoutStream);
  Matrix R(c.model.dim, 1);
  rng.fill_normal(R);
  return R.col(0);
}

Matrix readout_cotangent(int tokens, const Vector& R) {
  return Vector::Ones(tokens) * R.transpose();  // d(1^T X R)/dX = 1 R^T
}

Matrix readout_cotangent(int tokens, const Vector& R, Readout which) {
  if (which == Readout::all_tokens) return readout_cotangent(tokens, R);
  Matrix dXL = Matrix::Zero(tokens, R.size());  // d(x_N R)/dX = e_N R^T
  dXL.row(tokens - 1) = R.transpose();
  return dXL;
}

std::vector<Matrix> stack_backward(const std::vector<Matrix>& inputs, const std::vector<LayerWeights>& weights,
                                   const BlockParams& p, const Matrix& dXL,
                                   const std::function<void(int, const BlockGrads&)>& on_block) {
  const int L = static_cast<int>(inputs.size());
  std::vector<Matrix> dX(static_cast<std::size_t>(L) + 1);
  dX[static_cast<std::size_t>(L)] = dXL;
  BlockGrads g;
  for (int t = L - 1; t >= 0; --t) {  // dX(t) = J_t^T dX(t+1), J_t the Jacobian of block t
    const auto ti = static_cast<std::size_t>(t);
    block_backward(inputs[ti], weights[ti], at_layer(p, t), dX[ti + 1], g);  // block t's parameters
    if (on_block) on_block(t, g);
    dX[ti] = std::move(g.dX);
  }
  return dX;
}

Matrix stack_backward_segments(int layers, int length, const SegmentReplay& replay, const BlockParams& p,
                               const Matrix& dXL, const std::function<void(int, const Matrix&)>& on_dx,
                               const std::function<void(int, const BlockGrads&)>& on_block) {
  Matrix dX = dXL;
  on_dx(layers, dX);
  BlockTape tape;
  BlockGrads g;
  const int segments = (layers + length - 1) / length;
  for (int s = segments - 1; s >= 0; --s) {
    const int begin = s * length, end = std::min(layers, begin + length);
    replay(begin, end, tape);
    for (int t = end - 1; t >= begin; --t) {  // as stack_backward
      const auto k = static_cast<std::size_t>(t - begin);
      std::optional<RandomStream> rng, noise;  // copies: block_backward advances them
      if (!tape.dropout.empty()) rng = tape.dropout[k];
      if (!tape.noise.empty()) noise = tape.noise[k];
      block_backward(tape.inputs[k], tape.weights[k], at_layer(p, t), dX, g, rng ? &*rng : nullptr,
                     noise ? &*noise : nullptr);
      if (on_block) on_block(t, g);
      dX = std::move(g.dX);
      on_dx(t, dX);
    }
  }
  return dX;
}

double layer_weight_values(const ModelSpec& c) {
  const double d = c.model.dim, H = c.model.heads, dk = c.model.key_dim, dv = c.model.value_dim, w = c.mlp.width;
  const double weights = H * (2 * d * dk + (dv > 0 ? 2 * d * dv : d * d)) + (w > 0 ? 2 * d * w + w + d : 0) + 4 * d;
  const double biases = c.attention_bias ? H * (2 * dk + (dv > 0 ? dv : d)) + d : 0;  // attention.bias
  return weights + biases;
}

double gradient_store_bytes(const ModelSpec& c, int length) {
  double block = c.model.tokens * static_cast<double>(c.model.dim) + layer_weight_values(c);
  if (c.attention.kind == AttentionKind::random_markov)  // each block's logits G_h, N x N per head
    block += c.model.heads * static_cast<double>(c.model.tokens) * c.model.tokens;
  const double L = c.model.layers;
  if (length >= c.model.layers) return 8.0 * L * block;
  const double checkpoints = std::ceil(L / length);
  return 8.0 * (checkpoints + length) * block;
}

int gradient_segment_length(const ModelSpec& c) {
  const int L = std::max(c.model.layers, 1);
  if (gradient_store_bytes(c, L) <= kGradientStoreBytes) return L;
  return std::max(1, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(L)))));
}

double heads_norm(const std::vector<Matrix>& G) {
  double sq = 0.0;
  for (const auto& m : G) sq += m.squaredNorm();
  return std::sqrt(sq);
}

}  // namespace rcsim
