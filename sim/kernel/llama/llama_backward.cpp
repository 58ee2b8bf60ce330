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
Matrix norm_backward(const Matrix& X, const Vector& gain, const Vector& rstd, const ForwardOptions& o,
                     const Matrix& dY, Vector& dgain) {
  return o.norm ? rms_norm_backward(X, gain, rstd, dY, dgain) : dY;
}
Matrix norm_tangent(const Matrix& X, const Vector& gain, const Vector& rstd, const ForwardOptions& o,
                    const Matrix& dX) {
  return o.norm ? rms_norm_tangent(X, gain, rstd, dX) : dX;
}

void add_outer(Matrix& into, const Matrix& dY, const Matrix& X) { into.noalias() += dY.transpose() * X; }

void require_whole_sequence(const LlamaBlockCacheT<double>& bc, const char* who) {
  if (bc.first_position != 0 || bc.K.rows() != bc.X.rows())
    throw std::logic_error(std::string("llama ") + who + ": the cache is not of a whole sequence from position 0");
}

}  // namespace

LlamaBlock zero_gradients(const LlamaBlock& b) {
  const auto z = [](const auto& a) { return std::decay_t<decltype(a)>::Zero(a.rows(), a.cols()); };
  return {z(b.attn_norm), z(b.wq), z(b.wk), z(b.wv), z(b.wo), z(b.mlp_norm), z(b.w1), z(b.w2), z(b.w3)};
}

Matrix block_backward(const LlamaBlock& b, const LlamaConfig& c, const ForwardOptions& o,
                      const LlamaBlockCacheT<double>& bc, const Matrix& dOut, LlamaBlock& g) {
  require_whole_sequence(bc, "block_backward");
  // X_out = X_mid + SwiGLU(H2), H2 = N(X_mid)
  SwigluGradsT<double> sg{g.w1, g.w2, g.w3};
  const Matrix dH2 = swiglu_backward(bc.H2, b.w1, b.w2, b.w3, bc.mlp, dOut, sg);
  g.w1 = std::move(sg.w1), g.w2 = std::move(sg.w2), g.w3 = std::move(sg.w3);
  const Matrix dX_mid = dOut + norm_backward(bc.X_mid, b.mlp_norm, bc.rstd_mlp, o, dH2, g.mlp_norm);
  // X_mid = X + att Wo^T, att = GQA(rope(H Wq^T), rope(H Wk^T), H Wv^T), H = N(X)
  add_outer(g.wo, dX_mid, bc.att);
  GqaGradsT<double> ga = gqa_attention_backward(bc.Q, bc.K, bc.V, c.heads, c.kv_heads, bc.A, Matrix(dX_mid * b.wo));
  apply_rotary_transpose(ga.dQ, c.head_size(), 0, c.rope_theta);
  apply_rotary_transpose(ga.dK, c.head_size(), 0, c.rope_theta);
  add_outer(g.wq, ga.dQ, bc.H);
  add_outer(g.wk, ga.dK, bc.H);
  add_outer(g.wv, ga.dV, bc.H);
  const Matrix dH = ga.dQ * b.wq + ga.dK * b.wk + ga.dV * b.wv;
  return dX_mid + norm_backward(bc.X, b.attn_norm, bc.rstd_attn, o, dH, g.attn_norm);
}

Matrix block_tangent(const LlamaBlock& b, const LlamaConfig& c, const ForwardOptions& o,
                     const LlamaBlockCacheT<double>& bc, const Matrix& dX) {
  require_whole_sequence(bc, "block_tangent");
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

struct Forward {
  Matrix X;  // X(depth)
  std::vector<LlamaBlockCacheT<double>> caches;
};

Forward run_forward(const LlamaModel& m, const Matrix& X0, const ForwardOptions& o) {
  Forward f;
  KvCacheT<double> kv;
  f.X = forward_embedded<double>(m, X0, kv, o, nullptr, &f.caches);
  return f;
}

// The reverse sweep from dL/dX(depth) through the applied blocks (block t: model block t mod L).
void reverse_blocks(const LlamaModel& m, const ForwardOptions& o, const Forward& f, Matrix dX, LlamaGradients& g) {
  const LlamaConfig& c = m.config;
  for (const auto& b : m.blocks) g.blocks.push_back(zero_gradients(b));
  const auto depth = f.caches.size();
  g.dstates.assign(depth + 1, Matrix());
  g.dstates[depth] = dX;
  for (std::size_t t = depth; t-- > 0;) {
    const auto l = t % static_cast<std::size_t>(c.layers);
    dX = block_backward(m.blocks[l], c, o, f.caches[t], dX, g.blocks[l]);
    g.dstates[t] = dX;
  }
}

}  // namespace

LlamaGradients stack_gradients(const LlamaModel& m, const Matrix& X0, const Matrix& C, const ForwardOptions& o) {
  const Forward f = run_forward(m, X0, o);
  if (C.rows() != f.X.rows() || C.cols() != f.X.cols())
    throw UsageError("the cotangent is " + std::to_string(C.rows()) + " x " + std::to_string(C.cols()) +
                     "; X(depth) is " + std::to_string(f.X.rows()) + " x " + std::to_string(f.X.cols()));
  LlamaGradients g;
  g.loss = C.cwiseProduct(f.X).sum();
  g.X = f.X;
  reverse_blocks(m, o, f, C, g);
  return g;
}

LlamaGradients loss_gradients(const LlamaModel& m, const std::vector<int>& ids, const std::vector<int>& targets,
                              const ForwardOptions& o) {
  const LlamaConfig& c = m.config;
  if (targets.size() != ids.size())
    throw UsageError("targets has " + std::to_string(targets.size()) + " entries; the sequence has " +
                     std::to_string(ids.size()) + " (one target per position, -1 for none)");
  for (std::size_t t = 0; t < targets.size(); ++t)
    if (targets[t] < -1 || targets[t] >= c.vocab)
      throw UsageError("target " + std::to_string(targets[t]) + " at position " + std::to_string(t) +
                       " is outside -1 .. " + std::to_string(c.vocab - 1) + " (-1: not scored)");
  const Forward f = run_forward(m, embed(m, ids), o);
  // logits = N(X(depth); g_final) W_cls^T, as logits_of; the row scales kept for the adjoint.
  Vector rstd;
  const Matrix Y = final_normed(m, f.X, o, &rstd);
  const Matrix logits = Y * m.classifier.transpose();
  LlamaGradients g;
  g.X = f.X;
  Matrix dlogits = Matrix::Zero(logits.rows(), logits.cols());
  for (Eigen::Index t = 0; t < logits.rows(); ++t) {
    const int target = targets[static_cast<std::size_t>(t)];
    if (target < 0) continue;
    const double top = logits.row(t).maxCoeff();
    const RowVector e = (logits.row(t).array() - top).exp().matrix();
    const double sum = e.sum();
    g.loss += std::log(sum) + top - logits(t, target);  // -log softmax(z)[target]
    dlogits.row(t) = e / sum;
    dlogits(t, target) -= 1.0;
  }
  g.classifier = dlogits.transpose() * Y;
  const Matrix dY = dlogits * m.classifier;
  g.final_norm = Vector::Zero(c.dim);
  const Matrix dX = o.norm ? rms_norm_backward(f.X, m.final_norm, rstd, dY, g.final_norm) : dY;
  reverse_blocks(m, o, f, dX, g);
  return g;
}

Matrix stack_tangent(const LlamaModel& m, const Matrix& X0, const Matrix& dX0, const ForwardOptions& o) {
  const Forward f = run_forward(m, X0, o);
  Matrix dX = dX0;
  for (std::size_t t = 0; t < f.caches.size(); ++t)
    dX = block_tangent(m.blocks[t % static_cast<std::size_t>(m.config.layers)], m.config, o, f.caches[t], dX);
  return dX;
}

}  // namespace rcsim::llama
