// The names of the configuration's choices (mask.type = causal, ...) and their enums: one table
// per enum, used to parse a value, to print it back, and to list the allowed values of a key.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernel/model/model_spec.hpp"

namespace rcsim {

template <class Enum>
using NameTable = std::vector<std::pair<std::string, Enum>>;

const NameTable<MaskType>& mask_names();
const NameTable<NormType>& norm_names();
const NameTable<NormPosition>& norm_position_names();
const NameTable<Precision>& precision_names();
const NameTable<Platform>& platform_names();
const NameTable<MlpActivation>& mlp_activation_names();
const NameTable<WeightType>& weight_names();
const NameTable<InitType>& init_names();
const NameTable<AttentionKind>& attention_names();
const NameTable<Integrator>& integrator_names();
const NameTable<DynamicsSpeed>& speed_names();  // dynamics.speed
const NameTable<HeadMix>& head_mix_names();
const NameTable<ResidualProject>& project_names();
const NameTable<ResidualMixing>& mixing_names();  // residual.mixing (docs/science/gradients.md)
const NameTable<Readout>& readout_names();  // metrics.readout
const NameTable<RenyiDistance>& renyi_distance_names();  // metrics.renyi_distance
const NameTable<LogitBiasKind>& logit_bias_names();  // attention.logit_bias (docs/science/gradients.md)
const NameTable<ResidualDepthScaling>& residual_depth_scaling_names();  // residual.depth_scaling
const NameTable<NormDepthScaling>& norm_depth_scaling_names();          // norm.depth_scaling
const NameTable<BilinearType>& bilinear_names();
const NameTable<DiffHeadScale>& diff_head_scale_names();  // attention.diff_head_scale

// The names of a table, in its order (optionally only those in `keep`).
template <class Enum>
std::vector<std::string> names_of(const NameTable<Enum>& table, const std::vector<Enum>& keep = {}) {
  std::vector<std::string> out;
  for (const auto& [name, value] : table) {
    bool kept = keep.empty();
    for (const Enum k : keep) kept = kept || k == value;
    if (kept) out.push_back(name);
  }
  return out;
}

template <class Enum>
std::string enum_name(Enum e, const NameTable<Enum>& table) {
  for (const auto& [name, value] : table)
    if (value == e) return name;
  return "?";
}

// Name <-> enum helpers used by the CLI, the HDF5 attributes and the tests.
std::string to_string(MaskType t);
std::string to_string(NormType t);
std::string to_string(WeightType t);
std::string to_string(InitType t);
std::string to_string(BilinearType t);
std::string to_string(NormPosition p);
std::string to_string(Precision p);
std::string to_string(Platform p);
std::string to_string(MlpActivation a);

}  // namespace rcsim
