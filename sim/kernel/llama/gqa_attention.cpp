#include "kernel/llama/gqa_attention.hpp"

#include <cmath>

namespace rcsim::llama {

namespace {
template <class T>
T score_scale(Eigen::Index s) {
  return static_cast<T>(1.0 / std::sqrt(static_cast<double>(s)));
}

// The softmax Jacobian at the weights A applied to the rows of G: A .* (G - rowsum(A .* G))
// (symmetric, so the adjoint and the tangent alike).
template <class T>
MatrixT<T> softmax_jacobian(const MatrixT<T>& A, const MatrixT<T>& G) {
  const VectorT<T> inner = A.cwiseProduct(G).rowwise().sum();
  return A.cwiseProduct(G - inner.replicate(1, G.cols()));
}
}  // namespace

template <class T>
MatrixT<T> gqa_attention(const MatrixT<T>& Q, const MatrixT<T>& K, const MatrixT<T>& V, int heads, int kv_heads,
                         int first_position, std::vector<MatrixT<T>>* weights) {
  const Eigen::Index n = Q.rows(), s = Q.cols() / heads, keys = K.rows();
  const int group = heads / kv_heads;
  const T scale = score_scale<T>(s);
  MatrixT<T> out(n, Q.cols());
  MatrixT<T> scores(n, keys);
  if (weights) weights->clear();
  for (int h = 0; h < heads; ++h) {
    const Eigen::Index g = h / group;
    scores.noalias() = Q.middleCols(h * s, s) * K.middleCols(g * s, s).transpose();
    for (Eigen::Index i = 0; i < n; ++i) {
      const Eigen::Index visible = first_position + i + 1;  // causal: keys 0 .. position of i
      auto row = scores.row(i).head(visible);
      row *= scale;
      row = (row.array() - row.maxCoeff()).exp().matrix();
      row /= row.sum();
      scores.row(i).tail(keys - visible).setZero();
    }
    out.middleCols(h * s, s).noalias() = scores * V.middleCols(g * s, s);
    if (weights) weights->push_back(scores);
  }
  return out;
}

template <class T>
GqaGradsT<T> gqa_attention_backward(const MatrixT<T>& Q, const MatrixT<T>& K, const MatrixT<T>& V, int heads,
                                    int kv_heads, const std::vector<MatrixT<T>>& weights, const MatrixT<T>& dOut) {
  const Eigen::Index s = Q.cols() / heads;
  const int group = heads / kv_heads;
  const T scale = score_scale<T>(s);
  GqaGradsT<T> g{MatrixT<T>(Q.rows(), Q.cols()), MatrixT<T>::Zero(K.rows(), K.cols()),
                 MatrixT<T>::Zero(V.rows(), V.cols())};
  for (int h = 0; h < heads; ++h) {
    const Eigen::Index kv = (h / group) * s;
    const MatrixT<T>& A = weights[static_cast<std::size_t>(h)];
    const auto dO = dOut.middleCols(h * s, s);
    g.dV.middleCols(kv, s).noalias() += A.transpose() * dO;
    const MatrixT<T> dS = scale * softmax_jacobian<T>(A, dO * V.middleCols(kv, s).transpose());
    g.dQ.middleCols(h * s, s).noalias() = dS * K.middleCols(kv, s);
    g.dK.middleCols(kv, s).noalias() += dS.transpose() * Q.middleCols(h * s, s);
  }
  return g;
}

template <class T>
MatrixT<T> gqa_attention_tangent(const MatrixT<T>& Q, const MatrixT<T>& K, const MatrixT<T>& V, int heads,
                                 int kv_heads, const std::vector<MatrixT<T>>& weights, const MatrixT<T>& dQ,
                                 const MatrixT<T>& dK, const MatrixT<T>& dV) {
  const Eigen::Index s = Q.cols() / heads;
  const int group = heads / kv_heads;
  const T scale = score_scale<T>(s);
  MatrixT<T> out(Q.rows(), Q.cols());
  for (int h = 0; h < heads; ++h) {
    const Eigen::Index kv = (h / group) * s;
    const MatrixT<T>& A = weights[static_cast<std::size_t>(h)];
    const MatrixT<T> dS = scale * (dQ.middleCols(h * s, s) * K.middleCols(kv, s).transpose() +
                                   Q.middleCols(h * s, s) * dK.middleCols(kv, s).transpose());
    out.middleCols(h * s, s).noalias() =
        softmax_jacobian<T>(A, dS) * V.middleCols(kv, s) + A * dV.middleCols(kv, s);
  }
  return out;
}

template MatrixT<double> gqa_attention(const MatrixT<double>&, const MatrixT<double>&, const MatrixT<double>&, int,
                                       int, int, std::vector<MatrixT<double>>*);
template MatrixT<float> gqa_attention(const MatrixT<float>&, const MatrixT<float>&, const MatrixT<float>&, int, int,
                                      int, std::vector<MatrixT<float>>*);
template GqaGradsT<double> gqa_attention_backward(const MatrixT<double>&, const MatrixT<double>&,
                                                  const MatrixT<double>&, int, int, const std::vector<MatrixT<double>>&,
                                                  const MatrixT<double>&);
template MatrixT<double> gqa_attention_tangent(const MatrixT<double>&, const MatrixT<double>&, const MatrixT<double>&,
                                               int, int, const std::vector<MatrixT<double>>&, const MatrixT<double>&,
                                               const MatrixT<double>&, const MatrixT<double>&);
template GqaGradsT<float> gqa_attention_backward(const MatrixT<float>&, const MatrixT<float>&, const MatrixT<float>&,
                                                 int, int, const std::vector<MatrixT<float>>&, const MatrixT<float>&);

}  // namespace rcsim::llama
