#include "kernel/model/parameters.hpp"

namespace rcsim {

const std::vector<ParameterInfo>& parameter_table() {
  static const std::vector<ParameterInfo> table = [] {
    std::vector<ParameterInfo> rows;
    BlockGrads none;
    for_each_parameter([&](const ParameterInfo& p, const auto&) { rows.push_back(p); }, none);
    return rows;
  }();
  return table;
}

ParameterDims parameter_dims(const ModelSpec& c) {
  ParameterDims s;
  s.heads = c.model.heads;
  s.kv_heads = c.model.heads / c.model.kv_group();
  s.d = c.model.dim;
  s.d_k = c.model.key_dim;
  s.d_v = c.model.value_dim > 0 ? c.model.value_dim : c.model.dim;
  s.m = c.mlp.width;
  s.output = c.model.value_dim > 0;
  s.attention_bias = c.attention_bias;
  s.mlp_bias = c.mlp.width > 0 && c.mlp.bias;
  s.mlp_gate = c.mlp.width > 0 && c.mlp.activation == MlpActivation::swiglu;
  return s;
}

bool has_parameter(const ParameterInfo& p, const ParameterDims& s) {
  switch (p.needs) {
    case ParameterNeeds::always:
      return true;
    case ParameterNeeds::output:
      return s.output;
    case ParameterNeeds::attention_bias:
      return s.attention_bias;
    case ParameterNeeds::mlp:
      return s.m > 0;
    case ParameterNeeds::mlp_bias:
      return s.m > 0 && s.mlp_bias;
    case ParameterNeeds::mlp_gate:
      return s.m > 0 && s.mlp_gate;
  }
  return false;
}

int piece_count(const ParameterInfo& p, const ParameterDims& s) {
  if (!has_parameter(p, s)) return 0;
  switch (p.pieces) {
    case ParameterPieces::heads:
      return s.heads;
    case ParameterPieces::kv_heads:
      return s.kv_heads;
    case ParameterPieces::one:
      return 1;
    case ParameterPieces::norm_slots:
      return 4;
  }
  return 0;
}

int axis_extent(ParameterAxis a, const ParameterDims& s) {
  switch (a) {
    case ParameterAxis::one:
      return 1;
    case ParameterAxis::d:
      return s.d;
    case ParameterAxis::d_k:
      return s.d_k;
    case ParameterAxis::d_v:
      return s.d_v;
    case ParameterAxis::m:
      return s.m;
  }
  return 0;
}

long parameter_size(const ParameterInfo& p, const ParameterDims& s) {
  return static_cast<long>(piece_count(p, s)) * axis_extent(p.rows, s) * axis_extent(p.cols, s);
}

}  // namespace rcsim
