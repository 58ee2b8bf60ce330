// Forward mode (tangent-linear, JVP) through one transformer block and a stack of them, the
// companion of the reverse pass (kernel/block/backward.hpp, kernel/block/gradients.hpp), and the spectral norm
// of the full Jacobian J_t = dX(L)/dX(t) (an Nd x Nd map) by power iteration on J_t^T J_t
// (docs/science/gradients.md, "The full Jacobian's spectral norm").
//
// Notation: for a tangent dX of the block's input X, block_jvp returns J_block dX, the directional
// derivative d/de block(X + e dX) at e = 0. It runs the production forward with a cache, as the
// adjoint does (kernel/block/block_derivatives.hpp), and composes the operations' tangents (kernel/ops/), so
// <U, J V> = <J^T U, V> holds to rounding against block_backward. Covered: everything
// block_backward covers (every mask, heads, d_QK, softmax, USA, hardmax and random-Markov
// (dA = 0 along the logits), head_mix, W_O, attention biases, the normalisations with gains and
// biases at post, pre, peri, ngpt, the LayerNorm scaling c N(X), residual weights and skip gains
// (residual.mlp_alpha), the MLP and its activations, dropout with the forward's draws, shaped
// attention and gap removal, QK-normalisation, logit biases, residual.project = tangent, the RK4
// step, the noise step after the block with the forward's draws). Double precision only.
#pragma once

#include <cstdint>

#include "kernel/block/block.hpp"
#include "kernel/block/gradients.hpp"
#include "kernel/model/random.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// The power iteration's start vectors come from (seed, trial, kPowerStream) (kernel/model/random.hpp).

// J_block dX for block(X) with weights w and parameters p (block t's: at_layer). With dropout,
// `dropout` is a copy of the dropout stream as the forward pass entered this block; with
// dynamics.noise, `noise` a copy of the noise stream as it entered the block's noise step (both
// as block_backward; they advance).
Matrix block_jvp(const Matrix& X, const LayerWeights& w, const BlockParams& p, const Matrix& dX,
                 RandomStream* dropout = nullptr, RandomStream* noise = nullptr);

// The Jacobians J_t = dX(L)/dX(t) of a stack of L blocks as linear maps, from the same tape the
// reverse pass uses (segments of `length` blocks replayed by `replay`; with length >= L the tape is
// replayed once and kept). jvp(t, V) = J_t V (blocks t .. L-1 forward), vjp(t, U) = J_t^T U (blocks
// L-1 .. t backward). t = L is the identity.
class StackJacobian {
 public:
  StackJacobian(int layers, int length, SegmentReplay replay, const BlockParams& p);
  Matrix jvp(int t, const Matrix& V);
  Matrix vjp(int t, const Matrix& U);
  int layers() const { return layers_; }

 private:
  const BlockTape& segment(int s);  // the tape of segment s (replayed unless it is the one held)
  int layers_, length_;
  SegmentReplay replay_;
  BlockParams p_;
  BlockTape tape_;
  int held_ = -1;  // the segment tape_ holds
};

// Power iteration on J_t^T J_t from the start vector V0 (any nonzero N x d matrix): v <- J^T J v /
// ||J^T J v||, with the Rayleigh quotient lambda_k = ||J v_k||^2 (||v_k|| = 1) after each JVP.
// Stops when |lambda_k - lambda_{k-1}| <= tolerance * lambda_k or after max_iterations JVPs
// (each followed by one VJP unless it is the last). lambda is a lower bound of ||J_t||_2^2 for every
// k (a Rayleigh quotient), and converges to it from below when V0 has a component along the top
// right singular vector (almost surely for a Gaussian V0).
struct PowerIteration {
  double lambda = 0.0;  // the last Rayleigh quotient ||J v||^2
  int iterations = 0;   // JVPs done
  bool converged = false;
};
PowerIteration jacobian_power_iteration(StackJacobian& J, int t, const Matrix& V0, int max_iterations, double tolerance);

}  // namespace rcsim
