#include "config/names.hpp"

namespace rcsim {

const NameTable<MaskType>& mask_names() {
  static const NameTable<MaskType> t = {{"complete", MaskType::complete},
                                        {"causal", MaskType::causal},
                                        {"sliding_window", MaskType::sliding_window},
                                        {"unidirectional_sliding_window", MaskType::unidirectional_sliding_window},
                                        {"custom", MaskType::custom}};
  return t;
}
const NameTable<NormType>& norm_names() {
  static const NameTable<NormType> t = {{"none", NormType::none},
                                        {"sphere", NormType::sphere},
                                        {"layernorm", NormType::layernorm},
                                        {"projection", NormType::projection},
                                        {"rmsnorm", NormType::rmsnorm},
                                        {"dyt", NormType::dyt},
                                        {"derf", NormType::derf}};
  return t;
}
const NameTable<NormPosition>& norm_position_names() {
  static const NameTable<NormPosition> t = {
      {"post", NormPosition::post}, {"pre", NormPosition::pre}, {"peri", NormPosition::peri}, {"ngpt", NormPosition::ngpt}};
  return t;
}
const NameTable<Precision>& precision_names() {
  static const NameTable<Precision> t = {{"float64", Precision::float64}, {"float32", Precision::float32}};
  return t;
}
const NameTable<Platform>& platform_names() {
  static const NameTable<Platform> t = {
      {"auto", Platform::automatic}, {"reference", Platform::reference}, {"cpu", Platform::cpu},
      {"opencl", Platform::opencl}};
  return t;
}
const NameTable<MlpActivation>& mlp_activation_names() {
  static const NameTable<MlpActivation> t = {
      {"relu", MlpActivation::relu}, {"gelu", MlpActivation::gelu}, {"gelu_tanh", MlpActivation::gelu_tanh},
      {"tanh", MlpActivation::tanh}, {"swiglu", MlpActivation::swiglu}};
  return t;
}
const NameTable<WeightType>& weight_names() {
  static const NameTable<WeightType> t = {
      {"gaussian", WeightType::gaussian}, {"orthogonal", WeightType::orthogonal}, {"identity", WeightType::identity},
      {"zero", WeightType::zero},         {"fixed", WeightType::fixed},           {"file", WeightType::file},
      {"wishart", WeightType::wishart},   {"tied_qk", WeightType::tied_qk}};
  return t;
}
const NameTable<InitType>& init_names() {
  static const NameTable<InitType> t = {
      {"gaussian", InitType::gaussian}, {"sphere", InitType::sphere},     {"positive", InitType::positive},
      {"fixed", InitType::fixed},       {"file", InitType::file},         {"uniform", InitType::uniform},
      {"circle", InitType::circle},     {"equiangular", InitType::equiangular}, {"isometric", InitType::isometric}};
  return t;
}
// --- Peer dynamics (docs/science/peers.md) ---
const NameTable<AttentionKind>& attention_names() {
  static const NameTable<AttentionKind> t = {
      {"softmax", AttentionKind::softmax}, {"usa", AttentionKind::usa}, {"hardmax", AttentionKind::hardmax},
      {"random_markov", AttentionKind::random_markov}, {"softpick", AttentionKind::softpick}};
  return t;
}
const NameTable<Integrator>& integrator_names() {
  static const NameTable<Integrator> t = {{"euler", Integrator::euler}, {"rk4", Integrator::rk4}};
  return t;
}

const NameTable<DynamicsSpeed>& speed_names() {
  static const NameTable<DynamicsSpeed> t = {{"field", DynamicsSpeed::field}, {"unit", DynamicsSpeed::unit}};
  return t;
}
const NameTable<HeadMix>& head_mix_names() {
  static const NameTable<HeadMix> t = {{"sum", HeadMix::sum}, {"mean", HeadMix::mean}};
  return t;
}
const NameTable<ResidualProject>& project_names() {
  static const NameTable<ResidualProject> t = {{"none", ResidualProject::none}, {"tangent", ResidualProject::tangent}};
  return t;
}
const NameTable<ResidualMixing>& mixing_names() {
  static const NameTable<ResidualMixing> t = {
      {"none", ResidualMixing::none}, {"cowsik", ResidualMixing::cowsik}, {"deepnorm", ResidualMixing::deepnorm}};
  return t;
}
const NameTable<Readout>& readout_names() {
  static const NameTable<Readout> t = {{"all_tokens", Readout::all_tokens}, {"last_token", Readout::last_token}};
  return t;
}
const NameTable<RenyiDistance>& renyi_distance_names() {
  static const NameTable<RenyiDistance> t = {{"euclidean", RenyiDistance::euclidean},
                                             {"geodesic", RenyiDistance::geodesic}};
  return t;
}
const NameTable<DiffHeadScale>& diff_head_scale_names() {
  static const NameTable<DiffHeadScale> t = {{"lambda_init", DiffHeadScale::lambda_init},
                                             {"lambda", DiffHeadScale::lambda}};
  return t;
}
const NameTable<LogitBiasKind>& logit_bias_names() {
  static const NameTable<LogitBiasKind> t = {
      {"none", LogitBiasKind::none}, {"alibi", LogitBiasKind::alibi}, {"decay", LogitBiasKind::decay},
      {"file", LogitBiasKind::file}};
  return t;
}
const NameTable<ResidualDepthScaling>& residual_depth_scaling_names() {
  static const NameTable<ResidualDepthScaling> t = {{"none", ResidualDepthScaling::none},
                                                    {"inv_sqrt_depth", ResidualDepthScaling::inv_sqrt_depth}};
  return t;
}
const NameTable<NormDepthScaling>& norm_depth_scaling_names() {
  static const NameTable<NormDepthScaling> t = {{"none", NormDepthScaling::none},
                                                {"inv_sqrt_layer", NormDepthScaling::inv_sqrt_layer}};
  return t;
}
const NameTable<BilinearType>& bilinear_names() {
  static const NameTable<BilinearType> t = {
      {"none", BilinearType::none},   {"gaussian_product", BilinearType::gaussian_product},
      {"symmetric", BilinearType::symmetric}, {"goe", BilinearType::goe},
      {"wigner", BilinearType::wigner}, {"identity", BilinearType::identity}};
  return t;
}

std::string to_string(MaskType t) { return enum_name(t, mask_names()); }
std::string to_string(NormType t) { return enum_name(t, norm_names()); }
std::string to_string(NormPosition p) { return enum_name(p, norm_position_names()); }
std::string to_string(Precision p) { return enum_name(p, precision_names()); }
std::string to_string(Platform p) { return enum_name(p, platform_names()); }
std::string to_string(MlpActivation a) { return enum_name(a, mlp_activation_names()); }
std::string to_string(WeightType t) { return enum_name(t, weight_names()); }
std::string to_string(InitType t) { return enum_name(t, init_names()); }
std::string to_string(BilinearType t) { return enum_name(t, bilinear_names()); }

}  // namespace rcsim
