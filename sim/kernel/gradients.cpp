#include "kernel/gradients.hpp"

#include <cmath>

#include "kernel/random.hpp"

namespace rcsim {

Vector readout(const ModelSpec& c, int trial) {
  RandomStream rng(c.run.seed, static_cast<std::uint64_t>(trial), kReadoutStream);
  Matrix R(c.model.dim, 1);
  rng.fill_normal(R);
  return R.col(0);
}

Matrix readout_cotangent(int tokens, const Vector& R) {
  return Vector::Ones(tokens) * R.transpose();  // d(1^T X R)/dX = 1 R^T
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

double heads_norm(const std::vector<Matrix>& G) {
  double sq = 0.0;
  for (const auto& m : G) sq += m.squaredNorm();
  return std::sqrt(sq);
}

}  // namespace rcsim
