#include "kernel/llama/gqa_attention.hpp"

#include <cmath>

namespace rcsim::llama {

template <class T>
MatrixT<T> gqa_attention(const MatrixT<T>& Q, const MatrixT<T>& K, const MatrixT<T>& V, int heads, int kv_heads,
                         int first_position) {
  const Eigen::Index n = Q.rows(), s = Q.cols() / heads, keys = K.rows();
  const int group = heads / kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s)));
  MatrixT<T> out(n, Q.cols());
  MatrixT<T> scores(n, keys);
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
  }
  return out;
}

template MatrixT<double> gqa_attention(const MatrixT<double>&, const MatrixT<double>&, const MatrixT<double>&, int,
                                       int, int);
template MatrixT<float> gqa_attention(const MatrixT<float>&, const MatrixT<float>&, const MatrixT<float>&, int, int,
                                      int);

}  // namespace rcsim::llama
