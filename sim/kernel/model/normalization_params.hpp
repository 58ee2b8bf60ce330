// A row normalisation N with its parameters resolved for dimension d (norm.*: the kind, eps, the
// input scale of dyt/derf, gain and bias): plain data that the block settings point to and the
// weights hold per layer (norm.params = file). Applied by kernel/ops/normalization.hpp.
#pragma once

#include <vector>

#include "kernel/model/model_spec.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// A normalisation with its parameters resolved for dimension d.
struct Normalization {
  NormType type = kDefaultNormType;
  double eps = kDefaultNormEps;
  double alpha = kDefaultNormAlpha;  // dyt and derf: the input scale a
  RowVector gain;  // size d (all ones by default)
  RowVector bias;  // size d (all zeros by default)

  Normalization() = default;
  Normalization(NormType t, int d, double eps_ = kDefaultNormEps, const std::vector<double>& g = {},
                const std::vector<double>& b = {}, double alpha_ = kDefaultNormAlpha);
  static Normalization from_config(const ModelSpec& c);
};

}  // namespace rcsim
