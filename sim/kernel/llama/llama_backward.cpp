#include "kernel/llama/llama_backward.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kernel/support/errors.hpp"
#include "kernel/llama/gqa_attention.hpp"
#include "kernel/llama/rms_norm.hpp"
#include "kernel/llama/rotary.hpp"
#include "kernel/llama/swiglu.hpp"

namespace rcsim::llama {

namespace {

// The adjoint and tangent of the RMSNorm slot (the identity with norm off: no gain gradient).
template <class T>
MatrixT<T> norm_backward(const MatrixT<T>& X, const VectorT<T>& gain, const VectorT<T>& rstd, const ForwardOptions& o,
                         const MatrixT<T>& dY, VectorT<T>& dgain) {
  return o.norm ? rms_norm_backward<T>(X, gain, rstd, dY, dgain) : dY;
}
Matrix norm_tangent(const Matrix& X, const Vector& gain, const Vector& rstd, const ForwardOptions& o,
                    const Matrix& dX) {
  return o.norm ? rms_norm_tangent(X, gain, rstd, dX) : dX;
}

template <class T>
void add_outer(MatrixT<T>& into, const MatrixT<T>& dY, const MatrixT<T>& X) { into.noalias() += dY.transpose() * X; }

template <class T>
void require_whole_sequence(const LlamaBlockCacheT<T>& bc, const char* who) {
  if (bc.first_position != 0 || bc.K.rows() != bc.X.rows())
    throw std::logic_error(std::string("llama ") + who + ": the cache is not of a whole sequence from position 0");
}

template <class T>
LlamaBlockT<T> zeros_like(const LlamaBlockT<T>& b) {
  const auto z = [](const auto& a) { return std::decay_t<decltype(a)>::Zero(a.rows(), a.cols()); };
  return {z(b.attn_norm), z(b.wq), z(b.wk), z(b.wv), z(b.wo), z(b.mlp_norm), z(b.w1), z(b.w2), z(b.w3)};
}

// block_backward in T (float: run.precision = float32, every product and sum in float).
template <class T>
MatrixT<T> block_adjoint(const LlamaBlockT<T>& b, const LlamaConfig& c, const ForwardOptions& o,
                         const LlamaBlockCacheT<T>& bc, const MatrixT<T>& dOut, LlamaBlockT<T>& g) {
  require_whole_sequence(bc, "block_backward");
  // X_out = X_mid + SwiGLU(H2), H2 = N(X_mid)
  SwigluGradsT<T> sg{g.w1, g.w2, g.w3};
  const MatrixT<T> dH2 = swiglu_backward<T>(bc.H2, b.w1, b.w2, b.w3, bc.mlp, dOut, sg);
  g.w1 = std::move(sg.w1), g.w2 = std::move(sg.w2), g.w3 = std::move(sg.w3);
  const MatrixT<T> dX_mid = dOut + norm_backward<T>(bc.X_mid, b.mlp_norm, bc.rstd_mlp, o, dH2, g.mlp_norm);
  // X_mid = X + att Wo^T, att = GQA(rope(H Wq^T), rope(H Wk^T), H Wv^T), H = N(X)
  add_outer<T>(g.wo, dX_mid, bc.att);
  GqaGradsT<T> ga = gqa_attention_backward<T>(bc.Q, bc.K, bc.V, c.heads, c.kv_heads, bc.A, MatrixT<T>(dX_mid * b.wo));
  apply_rotary_transpose<T>(ga.dQ, c.head_size(), 0, c.rope_theta);
  apply_rotary_transpose<T>(ga.dK, c.head_size(), 0, c.rope_theta);
  add_outer<T>(g.wq, ga.dQ, bc.H);
  add_outer<T>(g.wk, ga.dK, bc.H);
  add_outer<T>(g.wv, ga.dV, bc.H);
  const MatrixT<T> dH = ga.dQ * b.wq + ga.dK * b.wk + ga.dV * b.wv;
  return dX_mid + norm_backward<T>(bc.X, b.attn_norm, bc.rstd_attn, o, dH, g.attn_norm);
}

}  // namespace

LlamaBlock zero_gradients(const LlamaBlock& b) { return zeros_like<double>(b); }

Matrix block_backward(const LlamaBlock& b, const LlamaConfig& c, const ForwardOptions& o,
                      const LlamaBlockCacheT<double>& bc, const Matrix& dOut, LlamaBlock& g) {
  return block_adjoint<double>(b, c, o, bc, dOut, g);
}

Matrix block_tangent(const LlamaBlock& b, const LlamaConfig& c, const ForwardOptions& o,
                     const LlamaBlockCacheT<double>& bc, const Matrix& dX) {
  require_whole_sequence<double>(bc, "block_tangent");
  const Matrix dH = norm_tangent(bc.X, b.attn_norm, bc.rstd_attn, o, dX);
  Matrix dQ = dH * b.wq.transpose(), dK = dH * b.wk.transpose();
  apply_rotary(dQ, c.head_size(), 0, c.rope_theta);  // linear: its own tangent
  apply_rotary(dK, c.head_size(), 0, c.rope_theta);
  const Matrix dV = dH * b.wv.transpose();
  const Matrix dX_mid =
      dX + gqa_attention_tangent(bc.Q, bc.K, bc.V, c.heads, c.kv_heads, bc.A, dQ, dK, dV) * b.wo.transpose();
  const Matrix dH2 = norm_tangent(bc.X_mid, b.mlp_norm, bc.rstd_mlp, o, dX_mid);
  return dX_mid + swiglu_tangent(b.w1, b.w2, b.w3, bc.mlp, dH2);
}

namespace {

template <class T>
struct Forward {
  MatrixT<T> X;  // X(depth)
  std::vector<LlamaBlockCacheT<T>> caches;
};

template <class T>
Forward<T> run_forward(const LlamaModelT<T>& m, const MatrixT<T>& X0, const ForwardOptions& o) {
  Forward<T> f;
  KvCacheT<T> kv;
  f.X = forward_embedded<T>(m, X0, kv, o, nullptr, &f.caches);
  return f;
}

template <class T>
LlamaBlock widened(const LlamaBlockT<T>& b) {
  const auto w = [](const auto& a) { return a.template cast<double>().eval(); };
  return {w(b.attn_norm), w(b.wq), w(b.wk), w(b.wv), w(b.wo), w(b.mlp_norm), w(b.w1), w(b.w2), w(b.w3)};
}

// The reverse sweep from dL/dX(depth) through the applied blocks (block t: model block t mod L),
// in T; g receives the gradients in double.
template <class T>
void reverse_blocks(const LlamaModelT<T>& m, const ForwardOptions& o, const Forward<T>& f, MatrixT<T> dX,
                    LlamaGradients& g) {
  const LlamaConfig& c = m.config;
  std::vector<LlamaBlockT<T>> blocks;
  for (const auto& b : m.blocks) blocks.push_back(zeros_like<T>(b));
  const auto depth = f.caches.size();
  g.dstates.assign(depth + 1, Matrix());
  g.dstates[depth] = dX.template cast<double>();
  for (std::size_t t = depth; t-- > 0;) {
    const auto l = t % static_cast<std::size_t>(c.layers);
    dX = block_adjoint<T>(m.blocks[l], c, o, f.caches[t], dX, blocks[l]);
    g.dstates[t] = dX.template cast<double>();
  }
  for (const auto& b : blocks) g.blocks.push_back(widened<T>(b));
}

template <class T>
LlamaGradients stack_gradients_in(const LlamaModelT<T>& m, const MatrixT<T>& X0, const MatrixT<T>& C,
                                  const ForwardOptions& o) {
  const Forward<T> f = run_forward<T>(m, X0, o);
  if (C.rows() != f.X.rows() || C.cols() != f.X.cols())
    throw UsageError("the cotangent is " + std::to_string(C.rows()) + " x " + std::to_string(C.cols()) +
                     "; X(depth) is " + std::to_string(f.X.rows()) + " x " + std::to_string(f.X.cols()));
  LlamaGradients g;
  g.loss = static_cast<double>(C.cwiseProduct(f.X).sum());
  g.X = f.X.template cast<double>();
  reverse_blocks<T>(m, o, f, C, g);
  return g;
}

template <class T>
LlamaGradients loss_gradients_in(const LlamaModelT<T>& m, const std::vector<int>& ids, const std::vector<int>& targets,
                                 const ForwardOptions& o) {
  const LlamaConfig& c = m.config;
  const Forward<T> f = run_forward<T>(m, embed<T>(m, ids), o);
  // logits = N(X(depth); g_final) W_cls^T, as logits_of; the row scales kept for the adjoint.
  VectorT<T> rstd;
  const MatrixT<T> Y = final_normed<T>(m, f.X, o, &rstd);
  const MatrixT<T> logits = Y * m.classifier.transpose();
  LlamaGradients g;
  g.X = f.X.template cast<double>();
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
  VectorT<T> dgain = VectorT<T>::Zero(c.dim);
  const MatrixT<T> dX = o.norm ? rms_norm_backward<T>(f.X, m.final_norm, rstd, dY, dgain) : dY;
  g.final_norm = dgain.template cast<double>();
  reverse_blocks<T>(m, o, f, dX, g);
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
  const Forward<double> f = run_forward<double>(m, X0, o);
  Matrix dX = dX0;
  for (std::size_t t = 0; t < f.caches.size(); ++t)
    dX = block_tangent(m.blocks[t % static_cast<std::size_t>(m.config.layers)], m.config, o, f.caches[t], dX);
  return dX;
}

}  // namespace rcsim::llama
