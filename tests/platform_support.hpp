// What the platform-specific tests share (tests/test_fused_attention.cpp, tests/test_opencl_platform.cpp):
// the weights of one layer and the relative error against the reference platform.
#pragma once

#include <cmath>

#include "kernel/model/random.hpp"
#include "kernel/support/types.hpp"
#include "kernel/model/weights.hpp"

namespace rcsim::test {

// `heads` heads of Gaussian W_Q, W_K (std 2/sqrt(d): sharper than the default, far from uniform
// attention), W_V (std 1/sqrt(d)), and W_O when value_dim > 0.
inline LayerWeights gaussian_weights(int d, int heads, int value_dim, RandomStream& rng) {
  LayerWeights w;
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  for (int h = 0; h < heads; ++h) {
    Matrix q(d, d), k(d, d), v(d, value_dim > 0 ? value_dim : d);
    rng.fill_normal(q, 2.0 * s);
    rng.fill_normal(k, 2.0 * s);
    rng.fill_normal(v, s);
    w.q.push_back(q);
    w.k.push_back(k);
    w.v.push_back(v);
    if (value_dim > 0) {
      Matrix o(value_dim, d);
      rng.fill_normal(o, s);
      w.o.push_back(o);
    }
  }
  return w;
}

// max |a - b| / max |b|: the relative error of a matrix (or of a vector of singular values).
inline double rel_max(const Matrix& a, const Matrix& b) {
  return (a - b).cwiseAbs().maxCoeff() / b.cwiseAbs().maxCoeff();
}

}  // namespace rcsim::test
