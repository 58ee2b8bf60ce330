// The SwiGLU MLP (Shazeer 2020) of Llama, row by row:
//   M(x) = W2 ( silu(W1 x) * (W3 x) ),   silu(z) = z / (1 + e^{-z}),
// W1, W3 [m, d], W2 [d, m], * entry by entry; a token row x maps to ((x W1^T) ... ) W2^T.
// The forward, and its adjoint and tangent at the activations the forward kept, side by side.
#pragma once

#include "kernel/support/types.hpp"

namespace rcsim::llama {

// What the forward keeps for the derivative passes: a = X W1^T, u = X W3^T, gate = silu(a) [n, m].
template <class T>
struct SwigluCacheT {
  MatrixT<T> a, u, gate;
};

template <class T>
MatrixT<T> swiglu(const MatrixT<T>& X, const MatrixT<T>& w1, const MatrixT<T>& w2, const MatrixT<T>& w3,
                  SwigluCacheT<T>* cache = nullptr);

// The weight gradients, shaped as the weights.
template <class T>
struct SwigluGradsT {
  MatrixT<T> w1, w2, w3;
};

// Adjoint at the forward's cache: dOut [n, d]; returns dX and adds into g (sized here when empty).
// With h = gate * u, dh = dOut W2, da = dh * u * silu'(a), du = dh * gate,
// silu'(a) = sigma(a) (1 + a (1 - sigma(a))):
//   dW2 += dOut^T h,  dW1 += da^T X,  dW3 += du^T X,  dX = da W1 + du W3.
template <class T>
MatrixT<T> swiglu_backward(const MatrixT<T>& X, const MatrixT<T>& w1, const MatrixT<T>& w2, const MatrixT<T>& w3,
                           const SwigluCacheT<T>& c, const MatrixT<T>& dOut, SwigluGradsT<T>& g);
// Tangent along dX: dh = silu'(a) * (dX W1^T) * u + gate * (dX W3^T), dM = dh W2^T.
template <class T>
MatrixT<T> swiglu_tangent(const MatrixT<T>& w1, const MatrixT<T>& w2, const MatrixT<T>& w3, const SwigluCacheT<T>& c,
                          const MatrixT<T>& dX);

}  // namespace rcsim::llama
