#include "kernel/llama/llama_backward.hpp"

#include <string>
#include <type_traits>

#include "kernel/block/backward.hpp"
#include "kernel/block/forward_mode.hpp"
#include "kernel/support/errors.hpp"

namespace rcsim::llama {

LlamaBlock zero_gradients(const LlamaConfig& c) {
  const Vector gain = Vector::Zero(c.dim);
  return {gain, Matrix::Zero(c.dim, c.dim), Matrix::Zero(c.kv_dim(), c.dim), Matrix::Zero(c.kv_dim(), c.dim),
          Matrix::Zero(c.dim, c.dim), gain, Matrix::Zero(c.hidden, c.dim), Matrix::Zero(c.dim, c.hidden),
          Matrix::Zero(c.hidden, c.dim)};
}

namespace {

// The main block's adjoint in T at block input X (float: block_backward in float arithmetic), the
// gradients widened to double.
BlockGrads adjoint(const Matrix& X, const LayerWeights& w, const BlockParams& p, const Matrix& dX) {
  BlockGrads g;
  block_backward(X, w, p, dX, g);
  return g;
}
BlockGrads adjoint(const MatrixF& X, const LayerWeightsT<float>& w, const BlockParams& p, const MatrixF& dX) {
  BlockGradsT<float> f;
  block_backward(X, w, p, dX, f);
  BlockGrads g;
  widen_grads(f, g);
  return g;
}

// The reverse sweep from dL/dX(depth) through the applied blocks (block t: model block t mod L), at
// the block inputs X(0) .. X(depth - 1) of the forward; g receives the gradients in double.
template <class T>
void reverse_blocks(const LlamaModelT<T>& m, const BlockStack<T>& stack, const std::vector<MatrixT<T>>& X,
                    MatrixT<T> dX, LlamaGradients& g) {
  const LlamaConfig& c = m.config;
  g.blocks.assign(m.blocks.size(), zero_gradients(c));
  const auto depth = static_cast<std::size_t>(stack.depth());
  g.dstates.assign(depth + 1, Matrix());
  g.dstates[depth] = dX.template cast<double>();
  for (std::size_t t = depth; t-- > 0;) {
    const int l = static_cast<int>(t);
    const BlockGrads bg = adjoint(X[t], stack.weights(l), stack.at(l), dX);
    add_block_gradients(bg, c, g.blocks[t % static_cast<std::size_t>(c.layers)]);
    g.dstates[t] = bg.dX;
    dX = bg.dX.template cast<T>();
  }
}

template <class T>
LlamaGradients stack_gradients_in(const LlamaModelT<T>& m, const MatrixT<T>& X0, const MatrixT<T>& C,
                                  const ForwardOptions& o) {
  const BlockStack<T> stack(m, static_cast<int>(X0.rows()), o);
  std::vector<MatrixT<T>> X;
  const MatrixT<T> out = stack.forward(X0, &X);
  if (C.rows() != out.rows() || C.cols() != out.cols())
    throw UsageError("the cotangent is " + std::to_string(C.rows()) + " x " + std::to_string(C.cols()) +
                     "; X(depth) is " + std::to_string(out.rows()) + " x " + std::to_string(out.cols()));
  LlamaGradients g;
  g.loss = static_cast<double>(C.cwiseProduct(out).sum());
  g.X = out.template cast<double>();
  reverse_blocks<T>(m, stack, X, C, g);
  return g;
}

template <class T>
LlamaGradients loss_gradients_in(const LlamaModelT<T>& m, const std::vector<int>& ids, const std::vector<int>& targets,
                                 const ForwardOptions& o) {
  const BlockStack<T> stack(m, static_cast<int>(ids.size()), o);
  std::vector<MatrixT<T>> X;
  const MatrixT<T> out = stack.forward(embed<T>(m, ids), &X);
  // logits = N(X(depth); g_final) W_cls^T, as logits_of.
  const Normalization norm = final_norm(m.config, m.final_norm.template cast<double>(), o);
  MatrixT<T> Y = out;
  normalize_rows(Y, norm);
  const MatrixT<T> logits = Y * m.classifier.transpose();
  LlamaGradients g;
  g.X = out.template cast<double>();
  MatrixT<T> dlogits = MatrixT<T>::Zero(logits.rows(), logits.cols());
  for (Eigen::Index t = 0; t < logits.rows(); ++t) {
    const int target = targets[static_cast<std::size_t>(t)];
    if (target < 0) continue;
    const T top = logits.row(t).maxCoeff();
    const RowVectorT<T> e = (logits.row(t).array() - top).exp().matrix();
    const T sum = e.sum();
    g.loss += static_cast<double>(std::log(sum) + top - logits(t, target));  // -log softmax(z)[target]
    dlogits.row(t) = e / sum;
    dlogits(t, target) -= T(1);
  }
  g.classifier = (dlogits.transpose() * Y).template cast<double>();
  const MatrixT<T> dY = dlogits * m.classifier;
  RowVectorT<T> dgain, dbias;
  const MatrixT<T> dX = norm_backward<T>(out, dY, norm, dgain, dbias);
  g.final_norm = o.norm ? Vector(dgain.template cast<double>().transpose()) : Vector::Zero(m.config.dim);
  reverse_blocks<T>(m, stack, X, dX, g);
  return g;
}

}  // namespace
LlamaGradients stack_gradients(const LlamaModel& m, const Matrix& X0, const Matrix& C, const ForwardOptions& o,
                               bool single) {
  if (!single) return stack_gradients_in<double>(m, X0, C, o);
  return stack_gradients_in<float>(to_float(m), X0.cast<float>(), C.cast<float>(), o);
}

LlamaGradients loss_gradients(const LlamaModel& m, const std::vector<int>& ids, const std::vector<int>& targets,
                              const ForwardOptions& o, bool single) {
  const LlamaConfig& c = m.config;
  if (targets.size() != ids.size())
    throw UsageError("targets has " + std::to_string(targets.size()) + " entries; the sequence has " +
                     std::to_string(ids.size()) + " (one target per position, -1 for none)");
  for (std::size_t t = 0; t < targets.size(); ++t)
    if (targets[t] < -1 || targets[t] >= c.vocab)
      throw UsageError("target " + std::to_string(targets[t]) + " at position " + std::to_string(t) +
                       " is outside -1 .. " + std::to_string(c.vocab - 1) + " (-1: not scored)");
  if (!single) return loss_gradients_in<double>(m, ids, targets, o);
  return loss_gradients_in<float>(to_float(m), ids, targets, o);
}

Matrix stack_tangent(const LlamaModel& m, const Matrix& X0, const Matrix& dX0, const ForwardOptions& o) {
  const BlockStack<double> stack(m, static_cast<int>(X0.rows()), o);
  std::vector<Matrix> X;
  stack.forward(X0, &X);
  Matrix dX = dX0;
  for (int t = 0; t < stack.depth(); ++t) dX = block_jvp(X[static_cast<std::size_t>(t)], stack.weights(t), stack.at(t), dX);
  return dX;
}

}  // namespace rcsim::llama
