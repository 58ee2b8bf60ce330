#include "kernel/block/forward_mode.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

#include "kernel/ops/noise.hpp"
#include "kernel/block/block_derivatives.hpp"
#include "kernel/ops/normalization.hpp"

namespace rcsim {

Matrix block_jvp(const Matrix& X, const LayerWeights& w, const BlockParams& p, const Matrix& dX, RandomStream* dropout,
                 RandomStream* noise) {
  const bool noisy = p.noise && p.noise->scale > 0.0;
  if (noisy && !noise) throw std::logic_error("block_jvp: dynamics.noise needs the noise stream of the block");
  BlockCacheT<double> cache;  // the production forward's activations, the same draws as block_backward
  Matrix out = block_forward_cached<double>(X, w, p, dropout, cache);
  const Matrix dOut = block_tangent<double>(X, w, p, cache, dX);
  if (!noisy) return dOut;
  Matrix before;  // X_next = P(out + scale G): the tangent of P at out + scale G
  apply_dynamics_noise(out, p.noise->scale, *noise, *p.noise->norm, &before);
  return norm_jvp<double>(before, dOut, *p.noise->norm);
}

StackJacobian::StackJacobian(int layers, int length, SegmentReplay replay, const BlockParams& p)
    : layers_(layers), length_(std::max(1, std::min(length, std::max(layers, 1)))), replay_(std::move(replay)), p_(p) {}

const BlockTape& StackJacobian::segment(int s) {
  if (held_ != s) {
    const int begin = s * length_, end = std::min(layers_, begin + length_);
    replay_(begin, end, tape_);
    held_ = s;
  }
  return tape_;
}

Matrix StackJacobian::jvp(int t, const Matrix& V) {
  Matrix dX = V;
  if (t >= layers_) return dX;
  for (int s = t / length_; s * length_ < layers_; ++s) {
    const BlockTape& tape = segment(s);
    const int begin = s * length_, end = std::min(layers_, begin + length_);
    for (int k = std::max(t, begin); k < end; ++k) {
      const auto i = static_cast<std::size_t>(k - begin);
      std::optional<RandomStream> rng, noise;  // copies: the cached forward advances them
      if (!tape.dropout.empty()) rng = tape.dropout[i];
      if (!tape.noise.empty()) noise = tape.noise[i];
      dX = block_jvp(tape.inputs[i], tape.weights[i], at_layer(p_, k), dX, rng ? &*rng : nullptr,
                     noise ? &*noise : nullptr);
    }
  }
  return dX;
}

Matrix StackJacobian::vjp(int t, const Matrix& U) {
  Matrix dX = U;
  if (t >= layers_) return dX;
  BlockGrads g;
  BlockParams p = p_;
  p.single = false;  // the adjoint of the double forward-mode pass (the measure refuses float32 runs)
  for (int s = (layers_ - 1) / length_; s >= t / length_; --s) {
    const BlockTape& tape = segment(s);
    const int begin = s * length_, end = std::min(layers_, begin + length_);
    for (int k = end - 1; k >= std::max(t, begin); --k) {
      const auto i = static_cast<std::size_t>(k - begin);
      std::optional<RandomStream> rng, noise;
      if (!tape.dropout.empty()) rng = tape.dropout[i];
      if (!tape.noise.empty()) noise = tape.noise[i];
      block_backward(tape.inputs[i], tape.weights[i], at_layer(p, k), dX, g, rng ? &*rng : nullptr,
                     noise ? &*noise : nullptr);
      dX = std::move(g.dX);
    }
  }
  return dX;
}

PowerIteration jacobian_power_iteration(StackJacobian& J, int t, const Matrix& V0, int max_iterations,
                                        double tolerance) {
  PowerIteration r;
  Matrix v = V0 / V0.norm();
  double previous = 0.0;
  for (int k = 1; k <= max_iterations; ++k) {
    const Matrix Jv = J.jvp(t, v);
    r.lambda = Jv.squaredNorm();  // v^T J^T J v with ||v|| = 1
    r.iterations = k;
    if (k > 1 && std::abs(r.lambda - previous) <= tolerance * r.lambda) {
      r.converged = true;
      break;
    }
    if (k == max_iterations) break;
    const Matrix u = J.vjp(t, Jv);  // J^T J v
    const double nu = u.norm();
    if (!(nu > 0.0)) {  // J v = 0 (or not finite): nothing to iterate on
      r.converged = nu == 0.0;
      break;
    }
    v = u / nu;
    previous = r.lambda;
  }
  return r;
}

}  // namespace rcsim
