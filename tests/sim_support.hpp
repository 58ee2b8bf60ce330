// Helpers the kernel-level test files share: a run from key values, a matrix compared entry by entry.
#pragma once

#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "config/config.hpp"
#include "io/inputs.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/support/types.hpp"

namespace rcsim::test {

// The whole run of the configuration `values` (every other key at its default), on `threads` threads.
inline RunResults simulate(const std::map<std::string, std::string>& values, int threads = 1) {
  return run_simulation(prepare(make_config(values)), threads);
}

// got == want entry by entry, to `tol` relative.
inline void check_matrix(const Matrix& got, const Matrix& want, double tol = 1e-14) {
  REQUIRE(got.rows() == want.rows());
  REQUIRE(got.cols() == want.cols());
  for (Eigen::Index i = 0; i < got.rows(); ++i)
    for (Eigen::Index j = 0; j < got.cols(); ++j) CHECK_THAT(got(i, j), Catch::Matchers::WithinRel(want(i, j), tol));
}

}  // namespace rcsim::test
