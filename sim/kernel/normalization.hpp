// Row normalisations after attention (SCIENCE.md section 1, step 6).
#pragma once

#include <vector>

#include "kernel/model_spec.hpp"
#include "kernel/types.hpp"

namespace rcsim {

// A normalisation with its parameters resolved for dimension d.
struct Normalization {
  NormType type = kDefaultNormType;
  double eps = kDefaultNormEps;
  RowVector gain;  // size d (all ones by default)
  RowVector bias;  // size d (all zeros by default)

  Normalization() = default;
  Normalization(NormType t, int d, double eps_ = kDefaultNormEps, const std::vector<double>& g = {},
                const std::vector<double>& b = {});
  static Normalization from_config(const ModelSpec& c);
};

// Normalise every row y of Y in place:
//   none:       y
//   sphere:     y / ||y||
//   layernorm:  g * (y - mean(y)) / sqrt(var(y) + eps) + b   (population variance)
//   projection: y - mean(y)
//   rmsnorm:    g * y / sqrt(mean(y^2) + eps)
// A row whose direction is lost (the vector divided by, i.e. y for sphere/rmsnorm and y - mean(y)
// for layernorm/projection, has norm below DBL_MIN: zero or subnormal) is a degenerate row. Its
// output is defined and finite: sphere and rmsnorm leave it zero, layernorm sets it to b,
// projection leaves it zero. Returns the number of degenerate rows.
int normalize_rows(Eigen::Ref<Matrix> Y, const Normalization& norm);
// The same in float (run.precision = float32; gain, bias and eps rounded to float).
int normalize_rows(Eigen::Ref<MatrixF> Y, const Normalization& norm);

}  // namespace rcsim
