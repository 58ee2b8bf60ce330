// Helpers the reverse-mode tests share (tests/test_backward_*.cpp, tests/test_forward_mode.cpp): the
// test cases (Case, Fixture), fourth-order finite differences, the stack check, engine runs on
// fixed inputs. The hand-written reverse mode (kernel/block/backward.hpp, kernel/block/gradients.hpp) is
// checked against central finite differences of the forward pass (transformer_block); the whole
// stack also against PyTorch autograd by tests/reference/autograd_check.py.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <functional>
#include <optional>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <limits>
#include <string>

#include "config/config.hpp"
#include "io/inputs.hpp"
#include "kernel/block/backward.hpp"
#include "kernel/ops/dropout.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/block/block.hpp"
#include "kernel/block/forward_mode.hpp"
#include "kernel/block/gradients.hpp"
#include "kernel/model/host_arrays.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/ops/noise.hpp"
#include "kernel/ops/tangent_projection.hpp"
#include "kernel/model/random.hpp"
#include "kernel/measures/signal_stats.hpp"
#include "kernel/ops/softmax.hpp"
#include "backward_masks.hpp"

namespace rcsim::backward_test {

inline constexpr double kTol = 1e-6;  // relative agreement with finite differences

inline Matrix gaussian(int r, int c, RandomStream& rng, double std = 1.0) {
  Matrix m(r, c);
  rng.fill_normal(m, std);
  return m;
}

// ||a - b||_F / ||b||_F (b the reference).
inline double rel_err(const Matrix& a, const Matrix& b) {
  const double nb = b.norm();
  return nb > 0.0 ? (a - b).norm() / nb : a.norm();
}

struct Case {
  int N = 5, d = 4, dk = 3, H = 2, dv = 0, m = 0;
  bool mlp_bias = true;
  bool norms_from_file = true;  // per-slot random gains and biases
  NormType norm = NormType::layernorm;
  NormPosition pos = NormPosition::pre;
  MlpActivation act = MlpActivation::gelu;
  double alpha = 0.7, d_qk = 2.0;
  bool usa = false, head_mean = false, hardmax = false;
  double skip = 1.0;     // residual.skip (variants)
  std::optional<double> mlp_alpha, mlp_skip;  // residual.mlp_alpha and its skip gain (variants)
  AttentionShape shape;  // attention.shape_a/b/c (variants)
  LogitBias logit_bias;  // attention.logit_bias, attention.decay (variants)
  bool ln_depth_scaling = false;  // norm.depth_scaling = inv_sqrt_layer (variants; pre)
  bool qk_norm = false;  // attention.qk_norm, attention.qk_scale (variants)
  double qk_scale = 1.0;
  bool attn_bias = false;  // attention.bias: b_Q, b_K, b_V per head and b_O
  // Particles and peers (post, no MLP for tangent and rk4): random-Markov logits G_h (drawn last),
  // the tangent projection, the RK4 step of size alpha.
  bool random_markov = false, tangent = false, rk4 = false;
};

inline LayerWeights random_weights(const Case& k, RandomStream& rng) {
  LayerWeights w;
  for (int h = 0; h < k.H; ++h) {
    w.q.push_back(gaussian(k.d, k.dk, rng, 0.8));
    w.k.push_back(gaussian(k.d, k.dk, rng, 0.8));
    w.v.push_back(gaussian(k.d, k.dv > 0 ? k.dv : k.d, rng, 0.6));
    if (k.dv > 0) w.o.push_back(gaussian(k.dv, k.d, rng, 0.6));
  }
  if (k.m > 0) {
    w.mlp_in = gaussian(k.d, k.m, rng, 0.7);
    if (k.act == MlpActivation::swiglu) w.mlp_gate = gaussian(k.d, k.m, rng, 0.7);  // only swiglu draws it
    w.mlp_out = gaussian(k.m, k.d, rng, 0.5);
    if (k.mlp_bias) {
      w.mlp_in_bias = gaussian(1, k.m, rng, 0.3);
      w.mlp_out_bias = gaussian(1, k.d, rng, 0.3);
    }
  }
  w.norms_from_file = k.norms_from_file;
  for (int s = 0; s < 4; ++s) {
    w.norms[s] = Normalization(k.norm, k.d, 1e-5);
    w.norms[s].gain = RowVector::Ones(k.d) + gaussian(1, k.d, rng, 0.3);
    w.norms[s].bias = gaussian(1, k.d, rng, 0.3);
  }
  if (k.attn_bias) {  // drawn last: the cases without biases keep their draws
    for (int h = 0; h < k.H; ++h) {
      w.q_bias.push_back(gaussian(1, k.dk, rng, 0.5));
      w.k_bias.push_back(gaussian(1, k.dk, rng, 0.5));
      w.v_bias.push_back(gaussian(1, k.dv > 0 ? k.dv : k.d, rng, 0.5));
    }
    w.o_bias = gaussian(1, k.d, rng, 0.5);
  }
  if (k.random_markov)  // drawn after everything else: the other cases keep their draws
    for (int h = 0; h < k.H; ++h) w.logits.push_back(gaussian(k.N, k.N, rng));
  if (k.logit_bias.kind == LogitBiasKind::file)  // B_h from a file: drawn after everything else
    for (int h = 0; h < k.H; ++h) w.logit_bias.push_back(gaussian(k.N, k.N, rng, 1.5));
  return w;
}

struct Fixture {
  Case k;
  MaskMatrix mask;
  Normalization shared;
  BlockParams p;
  Fixture(const Case& c, const MaskMatrix& m) : k(c), mask(m), shared(c.norm, c.d, 1e-5) {
    shared.gain = RowVector::LinSpaced(c.d, 0.8, 1.3);
    shared.bias = RowVector::LinSpaced(c.d, -0.2, 0.3);
    p.layer = LayerParams{&mask, c.d_qk, c.alpha, &shared};
    p.layer.attention.kind = c.usa             ? AttentionKind::usa
                             : c.hardmax       ? AttentionKind::hardmax
                             : c.random_markov ? AttentionKind::random_markov
                                               : AttentionKind::softmax;
    p.layer.head_mean = c.head_mean;
    p.layer.skip = c.skip;
    p.layer.attention.shape = c.shape;
    p.layer.attention.logit_bias = c.logit_bias;
    p.layer.attention.qk_norm = c.qk_norm;
    p.layer.attention.qk_scale = c.qk_scale;
    if (c.tangent) p.layer.project = ResidualProject::tangent;
    if (c.rk4) p.layer.integrator = Integrator::rk4;
    p.position = c.pos;
    p.activation = c.act;
    p.norm_depth_scaling = c.ln_depth_scaling;
    p.mlp_alpha = c.mlp_alpha;
    p.mlp_skip = c.mlp_skip;
  }
  // X(t+1) = block(X(t)) for every block; returns X(L).
  Matrix forward(const Matrix& X0, const std::vector<LayerWeights>& ws) const {
    Matrix X = X0, next;
    BlockWorkspace bws(k.N, k.d, k.dk);
    for (std::size_t t = 0; t < ws.size(); ++t) {
      transformer_block(X, ws[t], at_layer(p, static_cast<int>(t)), bws, next);
      X = next;
    }
    return X;
  }
  std::vector<Matrix> inputs(const Matrix& X0, const std::vector<LayerWeights>& ws) const {
    std::vector<Matrix> in;
    Matrix X = X0, next;
    BlockWorkspace bws(k.N, k.d, k.dk);
    for (std::size_t t = 0; t < ws.size(); ++t) {
      in.push_back(X);
      transformer_block(X, ws[t], at_layer(p, static_cast<int>(t)), bws, next);
      X = next;
    }
    return in;
  }
};


// Central finite differences of fourth order, (-f(x + 2h) + 8 f(x + h) - 8 f(x - h) + f(x - 2h)) / 12h
// (truncation O(h^4), rounding O(eps / h)), of f with respect to every entry of `x` (modified and
// restored).
inline Matrix fd_gradient(Matrix& x, const std::function<double()>& f, double h = 1e-4) {
  Matrix g(x.rows(), x.cols());
  const auto at = [&](Eigen::Index i, Eigen::Index j, double x0, double step) {
    x(i, j) = x0 + step;
    return f();
  };
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index j = 0; j < x.cols(); ++j) {
      const double x0 = x(i, j);
      const double d1 = at(i, j, x0, h) - at(i, j, x0, -h), d2 = at(i, j, x0, 2 * h) - at(i, j, x0, -2 * h);
      x(i, j) = x0;
      g(i, j) = (8 * d1 - d2) / (12 * h);
    }
  return g;
}
inline Matrix fd_gradient_row(RowVector& x, const std::function<double()>& f) {
  Matrix m = x;
  const Matrix g = fd_gradient(m, [&] {
    x = m.row(0);
    return f();
  });
  x = m.row(0);
  return g;
}

// A block variant's adjoint and tangent at (X, w, p): the loss 1^T X(t+1) C (a gradient measure's),
// its gradients wrt X and W_Q,0 against central differences, the JVP along V against fourth-order
// differences, and the dot-product test <C, J V> = <J^T C, V>. The relative errors and the gradients.
struct BlockDerivativeCheck {
  double dX = 0, dW_Q = 0, jvp = 0, dot = 0;
  BlockGrads grads;
};
inline BlockDerivativeCheck check_block_derivatives(const Case& k, Matrix X, LayerWeights w, const BlockParams& p,
                                                    const Matrix& C, const Matrix& V) {
  const auto block = [&](const Matrix& Z) {
    Matrix next;
    BlockWorkspace bws(k.N, k.d, k.dk);
    transformer_block(Z, w, p, bws, next);
    return next;
  };
  const auto loss = [&] { return block(X).cwiseProduct(C).sum(); };
  BlockDerivativeCheck r;
  block_backward(X, w, p, C, r.grads);
  r.dX = rel_err(r.grads.dX, fd_gradient(X, loss));
  r.dW_Q = rel_err(r.grads.dq[0], fd_gradient(w.q[0], loss));
  const double h = 1e-4;
  const Matrix fd = (8 * (block(X + h * V) - block(X - h * V)) - (block(X + 2 * h * V) - block(X - 2 * h * V))) / (12 * h);
  const Matrix jv = block_jvp(X, w, p, V);
  r.jvp = rel_err(jv, fd);
  r.dot = std::abs(C.cwiseProduct(jv).sum() - r.grads.dX.cwiseProduct(V).sum()) / (C.norm() * jv.norm());
  return r;
}

struct StackCheck {
  double x = 0, q = 0, k = 0, v = 0, o = 0, gain = 0, bias = 0, w_in = 0, b_in = 0, w_out = 0, b_out = 0;
  double bq = 0, bk = 0, bv = 0, bo = 0;  // attention biases
  double w_gate = 0;                      // mlp.activation = swiglu
  double worst() const {
    return std::max({x, q, k, v, o, gain, bias, w_in, b_in, w_out, b_out, bq, bk, bv, bo, w_gate});
  }
};

// Compares the reverse pass over `layers` blocks with finite differences of
// L = sum(C .* X(L)) with respect to X(0) and every parameter of block 0. With `adjoint`, the
// reverse pass is run with that case's block parameters (a wrong adjoint: the check must fail).
// With `adjoint_weights`, the reverse pass sees the weights it returns (e.g. fresh random-Markov logits).
inline StackCheck check_stack(const Case& k, const std::string& mask_type, int layers, std::uint64_t seed,
                       const Case* adjoint = nullptr,
                       const std::function<void(std::vector<LayerWeights>&)>& adjoint_weights = {}) {
  RandomStream rng(seed, 0);
  Fixture f(k, backward_test_mask(mask_type, k.N));
  const Fixture fa(adjoint ? *adjoint : k, f.mask);
  std::vector<LayerWeights> ws;
  for (int t = 0; t < layers; ++t) ws.push_back(random_weights(k, rng));
  Matrix X0 = gaussian(k.N, k.d, rng);
  const Matrix C = gaussian(k.N, k.d, rng);
  const auto loss = [&] { return f.forward(X0, ws).cwiseProduct(C).sum(); };
  BlockGrads g0;
  std::vector<LayerWeights> wa = ws;
  if (adjoint_weights) adjoint_weights(wa);
  const std::vector<Matrix> dX =
      stack_backward(f.inputs(X0, ws), wa, fa.p, C, [&](int t, const BlockGrads& g) {
        if (t == 0) g0 = g;
      });
  StackCheck r;
  r.x = rel_err(dX[0], fd_gradient(X0, loss));
  LayerWeights& w = ws[0];
  for (int h = 0; h < k.H; ++h) {
    r.q = std::max(r.q, rel_err(g0.dq[h], fd_gradient(w.q[h], loss)));
    const Matrix fd_k = fd_gradient(w.k[h], loss);
    r.k = std::max(r.k, rel_err(g0.dk[h], fd_k));
    r.v = std::max(r.v, rel_err(g0.dv[h], fd_gradient(w.v[h], loss)));
    if (k.dv > 0) r.o = std::max(r.o, rel_err(g0.dout[h], fd_gradient(w.o[h], loss)));
    if (k.attn_bias) {
      r.bq = std::max(r.bq, rel_err(g0.dq_bias[h], fd_gradient_row(w.q_bias[h], loss)));
      // b_K adds q_i . b_K to every logit of row i, which the softmax ignores: dL/db_K = 0 (1^T dS = 0
      // row by row). Its error is measured against the scale of W_K's gradient instead.
      const Matrix fd_bk = fd_gradient_row(w.k_bias[h], loss);
      r.bk = std::max(r.bk, (g0.dk_bias[h] - fd_bk).norm() / std::max(fd_bk.norm(), fd_k.norm()));
      r.bv = std::max(r.bv, rel_err(g0.dv_bias[h], fd_gradient_row(w.v_bias[h], loss)));
    }
  }
  if (k.attn_bias) r.bo = rel_err(g0.dout_bias, fd_gradient_row(w.o_bias, loss));
  if (k.m > 0) {
    r.w_in = rel_err(g0.mlp.d_in, fd_gradient(w.mlp_in, loss));
    r.w_out = rel_err(g0.mlp.d_out, fd_gradient(w.mlp_out, loss));
    if (k.act == MlpActivation::swiglu) r.w_gate = rel_err(g0.mlp.d_gate, fd_gradient(w.mlp_gate, loss));
    if (k.mlp_bias) {
      r.b_in = rel_err(g0.mlp.d_in_bias, fd_gradient_row(w.mlp_in_bias, loss));
      r.b_out = rel_err(g0.mlp.d_out_bias, fd_gradient_row(w.mlp_out_bias, loss));
    }
  }
  if (k.norms_from_file) {
    for (int s = 0; s < 4; ++s) {
      const Matrix fg = fd_gradient_row(w.norms[s].gain, loss), fb = fd_gradient_row(w.norms[s].bias, loss);
      // Slots the placement does not use (or parameters the norm ignores) have gradient 0 both ways.
      r.gain = std::max(r.gain, fg.norm() > 0 ? rel_err(g0.dgain[s], fg) : g0.dgain[s].norm());
      r.bias = std::max(r.bias, fb.norm() > 0 ? rel_err(g0.dbias[s], fb) : g0.dbias[s].norm());
    }
  }
  return r;
}

inline const char* norm_name(NormType t) {
  switch (t) {
    case NormType::none: return "none";
    case NormType::sphere: return "sphere";
    case NormType::layernorm: return "layernorm";
    case NormType::projection: return "projection";
    case NormType::rmsnorm: return "rmsnorm";
    case NormType::dyt: return "dyt";
    case NormType::derf: return "derf";
  }
  return "?";
}
inline const char* pos_name(NormPosition p) {
  switch (p) {
    case NormPosition::post: return "post";
    case NormPosition::pre: return "pre";
    case NormPosition::peri: return "peri";
    case NormPosition::ngpt: return "ngpt";
  }
  return "?";
}

inline std::string matrix_text(const Matrix& m) {
  std::ostringstream out;
  out << std::setprecision(17);
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    if (i) out << "; ";
    for (Eigen::Index j = 0; j < m.cols(); ++j) out << (j ? " " : "") << m(i, j);
  }
  return out.str();
}

// A run of the engine on fixed X(0) and W_Q (other weights from the trial's stream).
struct EngineRun {
  std::map<std::string, std::string> keys;
  Matrix X0, WQ, WO;  // WO: fixed W_O when set (model.value_dim > 0)
  RunResults run() const {
    auto k = keys;
    k["init.type"] = "fixed";
    k["init.matrix"] = matrix_text(X0);
    k["weights.q"] = "fixed";
    k["weights.q_matrix"] = matrix_text(WQ);
    if (WO.size() > 0) {
      k["weights.o"] = "fixed";
      k["weights.o_matrix"] = matrix_text(WO);
    }
    return run_simulation(prepare(make_config(k)), 1);
  }
  // L = 1^T X(L) R, the readout loss of the gradient measures.
  double loss() const {
    const RunResults r = run();
    return (r.snapshots[0].back() * readout(make_config(keys), 0)).sum();
  }
  static double value(const RunResults& r, const char* name, int column) {
    for (std::size_t i = 0; i < r.token_info.size(); ++i)
      if (std::string(r.token_info[i].name) == name) return r.token[i](0, column);
    for (std::size_t i = 0; i < r.attention_info.size(); ++i)
      if (std::string(r.attention_info[i].name) == name) return r.attention[i](0, column);
    throw std::logic_error(name);
  }
};

// The results matrix of the measure `name` (trials x recorded layers x values per layer).
inline const Matrix& measure_matrix(const RunResults& r, const char* name) {
  for (std::size_t i = 0; i < r.token_info.size(); ++i)
    if (std::string(r.token_info[i].name) == name) return r.token[i];
  throw std::logic_error(std::string(name) + " not recorded");
}

// The engine's keys of the small FD cases: N = 4, d = 3, fixed X(0) and W_Q (EngineRun).
inline std::map<std::string, std::string> small_keys(const std::string& variant) {
  std::map<std::string, std::string> k = {
      {"model.tokens", "4"},    {"model.dim", "3"},      {"model.layers", "3"},  {"norm.type", "layernorm"},
      {"norm.position", "pre"}, {"residual.alpha", "1"}, {"mask.type", "causal"}, {"mlp.width", "5"},
      {"run.trials", "1"},      {"output.tokens", "all"}};
  if (variant == "post rmsnorm complete 2 heads") {
    k["norm.position"] = "post";
    k["norm.type"] = "rmsnorm";
    k["mask.type"] = "complete";
    k["model.heads"] = "2";
    k["model.layers"] = "2";
    k["residual.alpha"] = "0.6";
  }
  return k;
}

// The engine run of the small FD cases: small_keys(variant), X(0) and W_Q drawn from the stream (seed, 0).
inline EngineRun small_engine(const std::string& variant, std::uint64_t seed) {
  RandomStream rng(seed, 0);
  EngineRun e;
  e.X0 = gaussian(4, 3, rng);
  e.WQ = gaussian(3, 3, rng, 0.7);
  e.keys = small_keys(variant);
  return e;
}

// The worst of a StackCheck's entries, printed by the tests.
inline std::string stack_text(const StackCheck& r) {
  std::ostringstream o;
  o << "X " << r.x << " Q " << r.q << " K " << r.k << " V " << r.v << " O " << r.o << " gain " << r.gain << " bias "
    << r.bias << " b_Q " << r.bq << " b_V " << r.bv << " b_O " << r.bo;
  return o.str();
}

inline constexpr double kParticleTol = 1e-7;  // FD (fourth order, h = 1e-4) agreement asked of these settings

}  // namespace rcsim::backward_test
