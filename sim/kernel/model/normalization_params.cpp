#include "kernel/model/normalization_params.hpp"

#include <string>

#include "kernel/support/errors.hpp"

namespace rcsim {

namespace {
RowVector resolve(const std::vector<double>& v, int d, double neutral, const char* what) {
  if (v.empty()) return RowVector::Constant(d, neutral);
  if (v.size() == 1) return RowVector::Constant(d, v[0]);
  if (static_cast<int>(v.size()) != d)
    throw UsageError(std::string("norm.") + what + ": expected 1 or d = " + std::to_string(d) + " values");
  return Eigen::Map<const RowVector>(v.data(), d);
}
}  // namespace

Normalization::Normalization(NormType t, int d, double eps_, const std::vector<double>& g,
                             const std::vector<double>& b, double alpha_)
    : type(t), eps(eps_), alpha(alpha_), gain(resolve(g, d, 1.0, "gain")), bias(resolve(b, d, 0.0, "bias")) {}

Normalization Normalization::from_config(const ModelSpec& c) {
  return Normalization(c.norm.type, c.model.dim, c.norm.eps, c.norm.gain, c.norm.bias, c.norm.alpha);
}

}  // namespace rcsim
