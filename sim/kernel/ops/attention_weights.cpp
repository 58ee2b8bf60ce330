#include "kernel/ops/attention_weights.hpp"

#include "kernel/ops/softmax.hpp"

namespace rcsim {

template <class T>
void attention_weights(AttentionKind kind, Eigen::Ref<MatrixT<T>> S, const MaskMatrix& mask, double usa_shift) {
  switch (kind) {
    case AttentionKind::usa: return usa_weights(S, mask, usa_shift);
    case AttentionKind::hardmax: return hardmax_weights(S, mask);
    case AttentionKind::softmax:
    case AttentionKind::random_markov: return masked_softmax(S, mask);
  }
}

bool attention_weights_need_logits(AttentionKind kind) {
  (void)kind;
  return false;
}

template <class T>
MatrixT<T> attention_weights_backward(AttentionKind kind, const MatrixT<T>& A, const MatrixT<T>& S,
                                      const MatrixT<T>& dA, const MaskMatrix& mask) {
  (void)S;
  switch (kind) {
    case AttentionKind::usa: return usa_backward<T>(A, dA, mask);
    case AttentionKind::hardmax: return MatrixT<T>::Zero(A.rows(), A.cols());
    case AttentionKind::softmax:
    case AttentionKind::random_markov: break;
  }
  return softmax_backward<T>(A, dA, mask);
}

template <class T>
MatrixT<T> attention_weights_jvp(AttentionKind kind, const MatrixT<T>& A, const MatrixT<T>& S, const MatrixT<T>& dS,
                                 const MaskMatrix& mask) {
  (void)S;
  switch (kind) {
    case AttentionKind::usa: return usa_jvp<T>(A, dS, mask);
    case AttentionKind::hardmax: return MatrixT<T>::Zero(A.rows(), A.cols());
    case AttentionKind::softmax:
    case AttentionKind::random_markov: break;
  }
  return softmax_jvp<T>(A, dS, mask);
}

#define RCSIM_ATTENTION_WEIGHTS(T)                                                                             \
  template void attention_weights<T>(AttentionKind, Eigen::Ref<MatrixT<T>>, const MaskMatrix&, double);        \
  template MatrixT<T> attention_weights_backward<T>(AttentionKind, const MatrixT<T>&, const MatrixT<T>&,       \
                                                    const MatrixT<T>&, const MaskMatrix&);                     \
  template MatrixT<T> attention_weights_jvp<T>(AttentionKind, const MatrixT<T>&, const MatrixT<T>&,            \
                                               const MatrixT<T>&, const MaskMatrix&);
RCSIM_ATTENTION_WEIGHTS(double)
RCSIM_ATTENTION_WEIGHTS(float)
#undef RCSIM_ATTENTION_WEIGHTS

}  // namespace rcsim
