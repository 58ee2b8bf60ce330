// Dropout in training mode (Srivastava et al. 2014), inverted as in PyTorch: every entry is
// zeroed with probability p and the kept entries are scaled by 1/(1-p), so the expectation of
// every entry is unchanged. Zeros (masked-out attention weights) stay exactly zero.
// The draws come from a stream of their own (kDropoutStream of (seed, trial)), one uniform per
// entry in row-major order whatever the entry's value, so p = 0 leaves the run bitwise as before
// and the pattern does not depend on the code path or the thread count.
#pragma once

#include <cstdint>

#include "kernel/model/random.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {


struct Dropout {
  double attention = 0.0;  // on each head's attention weights after the softmax
  double output = 0.0;     // on the attention output (sum over heads) before the residual
  RandomStream* rng = nullptr;  // required when either probability is > 0
};

// m(i, j) <- 0 with probability p, else m(i, j) / (1 - p); rows then columns. p = 0: no draw.
template <class Derived>
void apply_dropout(Eigen::DenseBase<Derived>& m, double p, RandomStream& rng) {
  if (p <= 0.0) return;
  const double scale = 1.0 / (1.0 - p);
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) {
      const bool drop = rng.uniform() < p;
      m(i, j) = drop ? 0.0 : m(i, j) * scale;
    }
}

// apply_dropout, and with `mask` the mask of its draws (0 or 1/(1-p), drawn from a copy of rng)
// for the derivative passes (kernel/ops/cache.hpp). p = 0: no draw, the mask left as it was.
template <class T, class Derived>
void apply_dropout(Eigen::DenseBase<Derived>& m, double p, RandomStream& rng, MatrixT<T>* mask) {
  if (p <= 0.0) return;
  if (mask) {
    RandomStream copy = rng;
    *mask = MatrixT<T>::Ones(m.rows(), m.cols());
    apply_dropout(*mask, p, copy);
  }
  apply_dropout(m, p, rng);
}

}  // namespace rcsim
