// Rotary position embedding (attention.rope, attention.rope_theta; llama2.c's adjacent pairs,
// kernel/llama/rotary.hpp): token i's q_i and k_i of one head rotated pair by pair (2j, 2j+1) by
// the angle i theta^(-2j/d_k). The rotation is linear, so its tangent is the rotation and its
// adjoint the transpose (the rotation by minus the angle); it keeps nothing in the cache.
#pragma once

#include <cstddef>

#include "kernel/llama/rotary.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

struct RotaryEmbedding {
  static bool active(const AttentionSettings& a) { return a.rope; }
  template <class T>
  static void forward(const AttentionSettings& a, std::size_t, MatrixT<T>& Q, MatrixT<T>& K, HeadCacheT<T>*) {
    llama::apply_rotary<T>(Q, static_cast<int>(Q.cols()), 0, a.rope_theta);
    llama::apply_rotary<T>(K, static_cast<int>(K.cols()), 0, a.rope_theta);
  }
  template <class T>
  static void adjoint(const AttentionSettings& a, std::size_t, const HeadCacheT<T>&, MatrixT<T>& dQ, MatrixT<T>& dK) {
    llama::apply_rotary_transpose<T>(dQ, static_cast<int>(dQ.cols()), 0, a.rope_theta);
    llama::apply_rotary_transpose<T>(dK, static_cast<int>(dK.cols()), 0, a.rope_theta);
  }
  template <class T>
  static void tangent(const AttentionSettings& a, std::size_t, const HeadCacheT<T>&, MatrixT<T>& dQ, MatrixT<T>& dK) {
    llama::apply_rotary<T>(dQ, static_cast<int>(dQ.cols()), 0, a.rope_theta);
    llama::apply_rotary<T>(dK, static_cast<int>(dK.cols()), 0, a.rope_theta);
  }
};

}  // namespace rcsim
