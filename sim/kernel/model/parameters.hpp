// The parameters of a block by name: one row per parameter (its name, how many arrays it has,
// their shape rule, when a model has it, which key puts it in weights.file), and one visitor,
// for_each_parameter, that hands each row with the matching member of the gradients
// (BlockGradsT, kernel/model/grads.hpp). Sizing, float -> double, rcsim.gradients' dict, the
// derivative dumps and the weight-file requirements (kernel/model/weights.cpp) are each one loop
// over it; a parameter of another shape is one row (K and V shared by groups of heads, model.kv_heads,
// are rows of ParameterPieces::kv_heads).
#pragma once

#include <cstddef>
#include <vector>

#include "kernel/model/model_spec.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/model/grads.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// How many arrays a parameter has: one per head, one per key/value head (model.kv_heads: W_K, W_V,
// b_K, b_V; kernel/model/kv_heads.hpp), one, or one per normalisation slot (NormSlot).
enum class ParameterPieces { heads, kv_heads, one, norm_slots };
// An axis of a parameter's arrays: 1 (the rows of a bias), d, d_k, d_v (the width of W_V:
// model.value_dim, or d without it), m (mlp.width).
enum class ParameterAxis { one, d, d_k, d_v, m };
// When a block has the parameter: always, with W_O (model.value_dim > 0), with attention biases
// (attention.bias), with an MLP (mlp.width > 0), with MLP biases (mlp.bias), with a gated MLP
// (mlp.activation = swiglu: W_gate).
enum class ParameterNeeds { always, output, attention_bias, mlp, mlp_bias, mlp_gate };
// The key whose `file` value puts the parameter in weights.file: weights.q, .k, .v, .o,
// weights.o (or weights.v without model.value_dim, for b_O), weights.mlp, norm.params.
enum class ParameterSource { q, k, v, o, o_or_v, mlp, norm };

struct ParameterInfo {
  const char* name;  // rcsim.gradients' key and weights.file's dataset ("W_Q"; norms: "norm_gain")
  ParameterPieces pieces;
  ParameterAxis rows, cols;  // each array's shape; rows = one: a row vector
  ParameterNeeds needs;
  ParameterSource source;
  // Where weights.file's array goes (kernel/model/weights.hpp); `piece` is the slot for norm_slots.
  std::optional<NdArray>* (*input)(InputArrays& in, int piece);
};

// Every parameter of `g...` (BlockGradsT of any scalar type, const or not, visited together) in
// the table's order (that of weights.file's datasets and rcsim.gradients' dict): f(info,
// g.member...). The one list of the members.
template <class F, class... G>
void for_each_parameter(F&& f, G&... g) {
  using P = ParameterPieces;
  using A = ParameterAxis;
  using N = ParameterNeeds;
  using S = ParameterSource;
  f(ParameterInfo{"W_Q", P::heads, A::d, A::d_k, N::always, S::q, [](InputArrays& a, int) { return &a.w_q; }}, g.dq...);
  f(ParameterInfo{"W_K", P::kv_heads, A::d, A::d_k, N::always, S::k, [](InputArrays& a, int) { return &a.w_k; }},
    g.dk...);
  f(ParameterInfo{"W_V", P::kv_heads, A::d, A::d_v, N::always, S::v, [](InputArrays& a, int) { return &a.w_v; }},
    g.dv...);
  f(ParameterInfo{"W_O", P::heads, A::d_v, A::d, N::output, S::o, [](InputArrays& a, int) { return &a.w_o; }},
    g.dout...);
  f(ParameterInfo{"b_Q", P::heads, A::one, A::d_k, N::attention_bias, S::q, [](InputArrays& a, int) { return &a.b_q; }},
    g.dq_bias...);
  f(ParameterInfo{"b_K", P::kv_heads, A::one, A::d_k, N::attention_bias, S::k,
                  [](InputArrays& a, int) { return &a.b_k; }},
    g.dk_bias...);
  f(ParameterInfo{"b_V", P::kv_heads, A::one, A::d_v, N::attention_bias, S::v,
                  [](InputArrays& a, int) { return &a.b_v; }},
    g.dv_bias...);
  f(ParameterInfo{"b_O", P::one, A::one, A::d, N::attention_bias, S::o_or_v,
                  [](InputArrays& a, int) { return &a.b_o; }},
    g.dout_bias...);
  f(ParameterInfo{"W_in", P::one, A::d, A::m, N::mlp, S::mlp, [](InputArrays& a, int) { return &a.w_in; }},
    g.mlp.d_in...);
  f(ParameterInfo{"W_gate", P::one, A::d, A::m, N::mlp_gate, S::mlp, [](InputArrays& a, int) { return &a.w_gate; }},
    g.mlp.d_gate...);
  f(ParameterInfo{"W_out", P::one, A::m, A::d, N::mlp, S::mlp, [](InputArrays& a, int) { return &a.w_out; }},
    g.mlp.d_out...);
  f(ParameterInfo{"b_in", P::one, A::one, A::m, N::mlp_bias, S::mlp, [](InputArrays& a, int) { return &a.b_in; }},
    g.mlp.d_in_bias...);
  f(ParameterInfo{"b_out", P::one, A::one, A::d, N::mlp_bias, S::mlp, [](InputArrays& a, int) { return &a.b_out; }},
    g.mlp.d_out_bias...);
  f(ParameterInfo{"norm_gain", P::norm_slots, A::one, A::d, N::always, S::norm,
                  [](InputArrays& a, int slot) { return &a.norm_gain[slot]; }},
    g.dgain...);
  f(ParameterInfo{"norm_bias", P::norm_slots, A::one, A::d, N::always, S::norm,
                  [](InputArrays& a, int slot) { return &a.norm_bias[slot]; }},
    g.dbias...);
}

// The rows of for_each_parameter alone, in its order.
const std::vector<ParameterInfo>& parameter_table();

// The sizes that the shape rules read: from a configuration, or from one block's weights.
// kv_heads: the gradients' key/value heads (model.kv_heads); the weights hold a copy per query head.
struct ParameterDims {
  int heads = 0, kv_heads = 0, d = 0, d_k = 0, d_v = 0, m = 0;
  bool output = false, attention_bias = false, mlp_bias = false;
  bool mlp_gate = false;  // mlp.activation = swiglu: W_gate
};
ParameterDims parameter_dims(const ModelSpec& c);
template <class T>
ParameterDims parameter_dims(const LayerWeightsT<T>& w) {
  ParameterDims s;
  s.heads = static_cast<int>(w.q.size());
  s.kv_heads = s.heads / w.kv_group;
  s.d = w.q.empty() ? 0 : static_cast<int>(w.q[0].rows());
  s.d_k = w.q.empty() ? 0 : static_cast<int>(w.q[0].cols());
  s.d_v = w.v.empty() ? 0 : static_cast<int>(w.v[0].cols());
  s.m = static_cast<int>(w.mlp_in.cols());
  s.output = !w.o.empty();
  s.attention_bias = !w.q_bias.empty();
  s.mlp_bias = w.mlp_in_bias.size() > 0;
  s.mlp_gate = w.mlp_gate.size() > 0;
  return s;
}

// Whether a block of `s` has parameter `p`; its number of arrays (0 without it) and their extent.
bool has_parameter(const ParameterInfo& p, const ParameterDims& s);
int piece_count(const ParameterInfo& p, const ParameterDims& s);
int axis_extent(ParameterAxis a, const ParameterDims& s);
// The number of values of `p` in one block of `s` (0 without it).
long parameter_size(const ParameterInfo& p, const ParameterDims& s);

// A member's arrays, whatever its form: a list (one per head), one array, or one per slot.
template <class M>
std::size_t pieces_of(const std::vector<M>& v) {
  return v.size();
}
template <class M, std::size_t n>
std::size_t pieces_of(const M (&)[n]) {
  return n;
}
template <class M>
std::size_t pieces_of(const M&) {
  return 1;
}
template <class M>
M& piece(std::vector<M>& v, std::size_t i) {
  return v[i];
}
template <class M>
const M& piece(const std::vector<M>& v, std::size_t i) {
  return v[i];
}
template <class M, std::size_t n>
M& piece(M (&a)[n], std::size_t i) {
  return a[i];
}
template <class M, std::size_t n>
const M& piece(const M (&a)[n], std::size_t i) {
  return a[i];
}
template <class M>
M& piece(M& m, std::size_t) {
  return m;
}
// Sets the number of arrays of a list; one array or a slot array keep theirs.
template <class M>
void set_pieces(std::vector<M>& v, std::size_t n) {
  v.resize(n);
}
template <class M>
void set_pieces(M&, std::size_t) {}

// g sized for a block of `s`, every parameter's gradient zero (absent ones empty); dX unchanged.
template <class T>
void size_gradients(const ParameterDims& s, BlockGradsT<T>& g) {
  for_each_parameter(
      [&](const ParameterInfo& p, auto& member) {
        const int n = piece_count(p, s);
        const bool row = p.rows == ParameterAxis::one;
        const Eigen::Index rows = n > 0 ? axis_extent(p.rows, s) : (row ? 1 : 0);
        const Eigen::Index cols = n > 0 ? axis_extent(p.cols, s) : 0;
        set_pieces(member, static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < pieces_of(member); ++i) piece(member, i).setZero(rows, cols);
      },
      g);
}

// `to` = `from` in the scalar type of `to` (float -> double), every member.
template <class T, class U>
void cast_gradients(const BlockGradsT<T>& from, BlockGradsT<U>& to) {
  to.dX = from.dX.template cast<U>();
  for_each_parameter(
      [](const ParameterInfo&, const auto& a, auto& b) {
        set_pieces(b, pieces_of(a));
        for (std::size_t i = 0; i < pieces_of(a); ++i) piece(b, i) = piece(a, i).template cast<U>();
      },
      from, to);
}

}  // namespace rcsim
