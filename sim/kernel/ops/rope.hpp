// Rotary position embedding (attention.rope, attention.rope_theta; llama2.c's adjacent pairs,
// kernel/ops/rotary.hpp): token i's q_i and k_i of one head rotated pair by pair (2j, 2j+1) by
// the angle i theta^(-2j/d_k) (with attention.differential each half of d_k / 2 columns rotated as
// its own head, by i theta^(-4j/d_k)). The rotation is linear, so its tangent is the rotation and its
// adjoint the transpose (the rotation by minus the angle); it keeps nothing in the cache.
#pragma once

#include <cstddef>

#include "kernel/ops/rotary.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

struct RotaryEmbedding {
  static bool active(const AttentionSettings& a) { return a.rope; }
  // The size of the rotated head: d_k, or with differential attention each half (Q1, Q2) as a head of
  // d_k / 2 (the paper's code rotates q viewed as 2 H heads of head_dim, interleaved pairs).
  static int rotated(const AttentionSettings& a, Eigen::Index dk) { return static_cast<int>(a.differential ? dk / 2 : dk); }
  template <class T>
  static void forward(const AttentionSettings& a, std::size_t, MatrixT<T>& Q, MatrixT<T>& K, HeadCacheT<T>*) {
    apply_rotary<T>(Q, rotated(a, Q.cols()), 0, a.rope_theta);
    apply_rotary<T>(K, rotated(a, K.cols()), 0, a.rope_theta);
  }
  template <class T>
  static void adjoint(const AttentionSettings& a, std::size_t, const HeadCacheT<T>&, MatrixT<T>& dQ, MatrixT<T>& dK) {
    apply_rotary_transpose<T>(dQ, rotated(a, dQ.cols()), 0, a.rope_theta);
    apply_rotary_transpose<T>(dK, rotated(a, dK.cols()), 0, a.rope_theta);
  }
  template <class T>
  static void tangent(const AttentionSettings& a, std::size_t, const HeadCacheT<T>&, MatrixT<T>& dQ, MatrixT<T>& dK) {
    apply_rotary<T>(dQ, rotated(a, dQ.cols()), 0, a.rope_theta);
    apply_rotary<T>(dK, rotated(a, dK.cols()), 0, a.rope_theta);
  }
};

}  // namespace rcsim
