// Logit soft-capping (Gemma 2; attention.logit_softcap = c > 0): the logits of every head, after
// their scaling and the logit bias, are squashed to (-c, c) before the attention weights,
//   S_c = c tanh(S / c),
// forward, adjoint dS = (1 - (S_c / c)^2) .* dS_c and tangent dS_c = (1 - (S_c / c)^2) .* dS (the
// map is diagonal, so one function serves both), at the capped logits the forward kept
// (HeadCacheT::Sc). General path only (layer.cpp; kernel_applies refuses it).
#pragma once

#include <cmath>

#include "kernel/support/types.hpp"

namespace rcsim {

template <class T>
void softcap_logits(MatrixT<T>& S, double cap) {
  const T c = static_cast<T>(cap);
  S = S.unaryExpr([c](T s) { return c * std::tanh(s / c); });
}

// The derivative of S -> S_c applied to M (a cotangent of S_c, or a tangent of S).
template <class T>
MatrixT<T> softcap_derivative(const MatrixT<T>& Sc, const MatrixT<T>& M, double cap) {
  const T c = static_cast<T>(cap);
  return (T(1) - (Sc.array() / c).square()).matrix().cwiseProduct(M);
}

}  // namespace rcsim
