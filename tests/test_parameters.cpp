// The parameters' table (kernel/model/parameters.hpp): it visits every member of the gradients,
// its shape rules give the weights' own sizes, and the weight-file requirements and float ->
// double come from it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "kernel/model/random.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/model/parameters.hpp"

using namespace rcsim;

namespace {

// The bytes of BlockGradsT<T> that the visitor reaches, skipping row `skip` (-1: none), plus dX.
template <class T>
std::size_t visited_bytes(int skip) {
  BlockGradsT<T> g;
  std::size_t bytes = sizeof(g.dX);
  int row = 0;
  for_each_parameter(
      [&](const ParameterInfo&, const auto& member) {
        if (row++ != skip) bytes += sizeof(member);
      },
      g);
  return bytes;
}

// A model with every parameter: 2 heads, W_O, attention and MLP biases, swiglu's W_gate, LayerNorm.
ModelSpec full_model() {
  ModelSpec c;
  c.model.tokens = 5, c.model.dim = 4, c.model.heads = 2, c.model.key_dim = 3, c.model.value_dim = 2;
  c.model.layers = 2;
  c.mlp.width = 6, c.mlp.bias = true, c.mlp.activation = MlpActivation::swiglu;
  c.attention_bias = true;
  c.norm.type = NormType::layernorm;
  for (WeightSpec* w : {&c.weights.q, &c.weights.k, &c.weights.v, &c.weights.o}) w->std = 0.5;
  c.weights.mlp_in_std = c.weights.mlp_out_std = c.weights.mlp_in_bias_std = c.weights.mlp_out_bias_std = 0.5;
  return c;
}

// The values of one block's weights, counted member by member (independently of the table); the
// four normalisations' gains and biases are d values each.
long counted_weights(const LayerWeights& w, int d) {
  long n = 0;
  for (const auto* list : {&w.q, &w.k, &w.v, &w.o})
    for (const Matrix& m : *list) n += m.size();
  for (const auto* list : {&w.q_bias, &w.k_bias, &w.v_bias})
    for (const RowVector& b : *list) n += b.size();
  n += w.o_bias.size() + w.mlp_in.size() + w.mlp_out.size() + w.mlp_in_bias.size() + w.mlp_out_bias.size();
  n += w.mlp_gate.size();
  return n + 2 * 4 * d;
}

}  // namespace

TEST_CASE("parameters: the table visits every member of the gradients", "[parameters]") {
  // Every member but dX is a parameter's gradient; a member the visitor missed leaves bytes over.
  CHECK(visited_bytes<double>(-1) == sizeof(BlockGradsT<double>));
  CHECK(visited_bytes<float>(-1) == sizeof(BlockGradsT<float>));
  const int rows = static_cast<int>(parameter_table().size());
  REQUIRE(rows == 15);
  for (int skip = 0; skip < rows; ++skip) {  // the check fails for a table without any one row
    INFO("without row " << parameter_table()[static_cast<std::size_t>(skip)].name);
    CHECK(visited_bytes<double>(skip) < sizeof(BlockGradsT<double>));
  }
  // The names: weights.file's datasets and rcsim.gradients' keys, each once.
  std::set<std::string> names;
  for (const ParameterInfo& p : parameter_table()) names.insert(p.name);
  CHECK(names == std::set<std::string>{"W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_in", "W_gate",
                                       "W_out", "b_in", "b_out", "norm_gain", "norm_bias"});
}

TEST_CASE("parameters: the shape rules give the weights' sizes", "[parameters]") {
  const ModelSpec c = full_model();
  const InputArrays files;  // outlives the sampler, which keeps a reference to it
  WeightSampler sampler(c, files);
  RandomStream rng(7, 0);
  sampler.begin_trial(rng);
  const LayerWeights& w = sampler.layer(0, rng);
  const long expected = counted_weights(w, c.model.dim);
  // By hand: H (d d_k + d d_k + d d_v + d_v d + 2 d_k + d_v) + d + (d m + d m + m d + m + d) + 8 d.
  CHECK(w.mlp_gate.size() == 24);
  CHECK(expected == 2 * (12 + 12 + 8 + 8 + 3 + 3 + 2) + 4 + (24 + 24 + 24 + 6 + 4) + 32);
  long from_spec = 0;
  for (const ParameterInfo& p : parameter_table()) from_spec += parameter_size(p, parameter_dims(c));
  CHECK(from_spec == expected);
  // Gradients sized from the weights: the same count, every array the shape of its weight.
  BlockGrads g;
  size_gradients(parameter_dims(w), g);
  long sized = 0;
  for_each_parameter(
      [&](const ParameterInfo&, const auto& member) {
        for (std::size_t i = 0; i < pieces_of(member); ++i) sized += piece(member, i).size();
      },
      g);
  CHECK(sized == expected);
  REQUIRE(g.dv.size() == 2);
  CHECK((g.dv[1].rows() == 4 && g.dv[1].cols() == 2 && g.dout[0].rows() == 2 && g.dout[0].cols() == 4));
  CHECK((g.mlp.d_in.rows() == 4 && g.mlp.d_in.cols() == 6 && g.dk_bias[0].size() == 3));
  CHECK((g.mlp.d_gate.rows() == 4 && g.mlp.d_gate.cols() == 6));
  // Without W_O, biases and MLP those are empty (rcsim.gradients then has no such key).
  ModelSpec plain = c;
  plain.model.value_dim = 0, plain.mlp.width = 0, plain.attention_bias = false;
  size_gradients(parameter_dims(plain), g);
  CHECK((g.dout.empty() && g.dq_bias.empty() && g.dout_bias.size() == 0 && g.mlp.d_in.size() == 0 &&
         g.mlp.d_out_bias.size() == 0 && g.mlp.d_gate.size() == 0 && g.dgain[3].size() == 4));
  CHECK(g.dv[0].cols() == 4);  // d_v = d without model.value_dim
}

TEST_CASE("parameters: float gradients widened member by member", "[parameters]") {
  const ModelSpec c = full_model();
  BlockGradsT<float> f;
  size_gradients(parameter_dims(c), f);
  float x = 0.25f;
  f.dX = MatrixF::Constant(2, 3, 1.5f);
  for_each_parameter(
      [&](const ParameterInfo&, auto& member) {
        for (std::size_t i = 0; i < pieces_of(member); ++i) piece(member, i).setConstant(x += 1.0f / 3.0f);
      },
      f);
  BlockGrads d;
  d.dq.assign(5, Matrix::Ones(1, 1));  // stale contents are replaced
  cast_gradients(f, d);
  CHECK(d.dX == f.dX.cast<double>());
  int rows = 0;
  for_each_parameter(
      [&](const ParameterInfo& p, const auto& a, const auto& b) {
        INFO(p.name);
        ++rows;
        REQUIRE(pieces_of(a) == pieces_of(b));
        for (std::size_t i = 0; i < pieces_of(a); ++i) CHECK(piece(b, i) == piece(a, i).template cast<double>());
      },
      f, d);
  CHECK(rows == 15);
  CHECK(d.dq.size() == 2);
}

TEST_CASE("parameters: weights.file's datasets come from the table", "[parameters]") {
  ModelSpec c = full_model();
  for (WeightSpec* w : {&c.weights.q, &c.weights.k, &c.weights.v, &c.weights.o}) w->type = WeightType::file;
  c.weights.mlp = WeightType::file;
  c.norm.params_from_file = true;
  c.norm.position = NormPosition::pre;  // the attn and mlp slots only
  InputArrays in;
  std::vector<std::string> names;
  for (const InputRequirement& r : input_requirements(c, in)) names.push_back(r.dataset);
  CHECK(names == std::vector<std::string>{"W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_in", "W_gate",
                                          "W_out", "b_in", "b_out", "norm_attn_gain", "norm_mlp_gain",
                                          "norm_attn_bias", "norm_mlp_bias"});
  for (const InputRequirement& r : input_requirements(c, in)) {
    INFO(r.dataset);
    if (r.dataset == "W_V") {
      CHECK(r.shapes == std::vector<Extents>{{2, 4, 2}, {2, 2, 4, 2}});
      CHECK(r.axes ==
            "[d, d_v]: model.dim = 4, model.value_dim = 2; [H, ...]: model.heads = 2; a leading [L, ...] "
            "per layer: model.layers = 2");
      CHECK(r.target == &in.w_v);
    }
    if (r.dataset == "b_K") CHECK(r.shapes == std::vector<Extents>{{2, 3}, {2, 2, 3}});
    if (r.dataset == "W_out") CHECK(r.shapes == std::vector<Extents>{{6, 4}, {2, 6, 4}});
    if (r.dataset == "norm_mlp_bias") CHECK(r.target == &in.norm_bias[kNormMlp]);
  }
  // b_O comes with W_V's file without model.value_dim; rmsnorm has no bias; W_O none.
  c.model.value_dim = 0;
  c.weights.v.type = WeightType::gaussian;
  c.norm.type = NormType::rmsnorm;
  names.clear();
  for (const InputRequirement& r : input_requirements(c, in)) names.push_back(r.dataset);
  CHECK(names == std::vector<std::string>{"W_Q", "W_K", "b_Q", "b_K", "W_in", "W_gate", "W_out", "b_in", "b_out",
                                          "norm_attn_gain", "norm_mlp_gain"});
}
