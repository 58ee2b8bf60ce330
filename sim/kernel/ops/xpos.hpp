// xPos (Sun et al. 2023, "A length-extrapolatable transformer"; attention.xpos,
// attention.xpos_scale_base = B): a multiplicative relative-position decay of the logits. Within
// each head of size d_k, the pair of components (2j, 2j+1), j = 0 .. d_k/2 - 1, of the token at
// position i is scaled by zeta_j^(i/B) in q_i and by zeta_j^(-i/B) in k_i,
//   zeta_j = (2j + 0.4 d_k) / (1.4 d_k)  in [2/7, 1),
// so that S_ij = sum_j' zeta_j'^((i-j)/B) q_i,j' k_j,j' / sqrt(d_QK) depends on the positions only
// through i - j: under the causal mask (i >= j) a key j positions back contributes at most
// zeta^((i-j)/B) of its plain logit, fastest in the low pairs (torchscale's XPOS; the paper pairs
// it with rotary embedding, attention.rope, which it commutes with, and which the list applies
// first). The scaling is linear and diagonal, so it is its own adjoint and tangent; it keeps
// nothing in the cache.
// Positions are centred as torchscale's XPOS centres them (min_pos = -(N // 2) rounded down, i.e.
// p_i = i - ceil(N/2) for the token at row i): the logits depend on p_i - p_j = i - j only, so they
// are those of positions from 0, while the factors span (7/2)^(+-ceil(N/2)/B) instead of
// (7/2)^(N/B). Their range in a precision is checked up front (xpos_log2_span, config's check_xpos).
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>

#include "kernel/model/model_spec.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// zeta_j of the pair (2j, 2j+1) holding component k of a head of size d (torchscale: gamma = 0.4).
inline double xpos_zeta(Eigen::Index k, Eigen::Index d) {
  const double dd = static_cast<double>(d);
  return (static_cast<double>(k - k % 2) + 0.4 * dd) / (1.4 * dd);
}

// The centred position of row i of n (torchscale: i + (-n) // 2 in Python's floor division).
inline double xpos_position(Eigen::Index i, Eigen::Index n) { return static_cast<double>(i - (n + 1) / 2); }

// log2 of the largest factor xPos meets at N tokens: (7/2)^(ceil(N/2)/B) in Q and K (zeta >= 2/7), or,
// when the mask lets a query see keys after it, its logits' (7/2)^((N-1)/B) q.k (the decay grows
// there: xPos is meant for causal masks).
inline double xpos_log2_span(int tokens, double scale_base, bool keys_after_query) {
  const double reach = keys_after_query ? tokens - 1.0 : static_cast<double>((tokens + 1) / 2);
  return reach / scale_base * std::log2(3.5);
}
// The span a precision holds: max_exponent - 24, so that a component of q up to 2^23 times the largest
// factor stays finite and one of k down to 2^-22 times the smallest stays normal (float64 1000, float32
// 104: N / B up to 1106 and 115 under a causal mask, 553 and 57 with keys after the query).
template <class T>
constexpr int xpos_log2_headroom() {
  return std::numeric_limits<T>::max_exponent - 24;
}

// M(i, k) times zeta(k)^(sign p_i / B), p_i = xpos_position(i, N) (the factor in double, rounded to
// T); sign +1 for queries, -1 for keys. Diagonal: the same call maps tangents forward and cotangents back.
template <class T>
void xpos_scale(MatrixT<T>& M, double scale_base, double sign) {
  for (Eigen::Index k = 0; k < M.cols(); ++k) {
    const double zeta = xpos_zeta(k, M.cols());
    for (Eigen::Index i = 0; i < M.rows(); ++i)
      M(i, k) *= static_cast<T>(std::pow(zeta, sign * xpos_position(i, M.rows()) / scale_base));
  }
}

struct XposDecay {
  static bool active(const AttentionSettings& a) { return a.xpos; }
  template <class T>
  static void forward(const AttentionSettings& a, std::size_t, MatrixT<T>& Q, MatrixT<T>& K, HeadCacheT<T>*) {
    xpos_scale<T>(Q, a.xpos_scale_base, 1.0);
    xpos_scale<T>(K, a.xpos_scale_base, -1.0);
  }
  template <class T>
  static void adjoint(const AttentionSettings& a, std::size_t, const HeadCacheT<T>&, MatrixT<T>& dQ, MatrixT<T>& dK) {
    xpos_scale<T>(dQ, a.xpos_scale_base, 1.0);
    xpos_scale<T>(dK, a.xpos_scale_base, -1.0);
  }
  template <class T>
  static void tangent(const AttentionSettings& a, std::size_t h, const HeadCacheT<T>& c, MatrixT<T>& dQ,
                      MatrixT<T>& dK) {
    adjoint<T>(a, h, c, dQ, dK);
  }
};

}  // namespace rcsim
