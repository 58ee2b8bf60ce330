// The masks of the backward-pass checks (tests/test_backward_*.cpp, tests/backward_dump.cpp): the
// three contiguous kinds and a custom mask whose rows hold several ranges (the general path).
#pragma once

#include <cstdlib>
#include <string>

#include "kernel/support/types.hpp"

namespace rcsim {

inline MaskMatrix backward_test_mask(const std::string& type, int n) {
  MaskMatrix m = MaskMatrix::Zero(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (type == "complete") m(i, j) = 1;
      if (type == "causal") m(i, j) = j <= i;
      if (type == "window") m(i, j) = std::abs(i - j) <= 1;
      if (type == "custom") m(i, j) = i == j || (i + 2 * j) % 3 == 0;  // rows of several ranges
    }
  return m;
}

}  // namespace rcsim
