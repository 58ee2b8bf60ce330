// Eigen's decompositions that rcsim uses, compiled once (eigen_instances.cpp) instead of in every
// file that uses them: an explicit instantiation declaration tells each translation unit that the
// members exist elsewhere. BDCSVD alone took 30 to 40 CPU-seconds in each of metrics.cpp and
// test_metrics.cpp (docs/dev/testing.md, "Build time of the default target"). The code is the
// one Eigen's templates give either way, compiled with the same flags (ISO C++, so no
// floating-point contraction differs with inlining): the results are bitwise the same.
#pragma once

#include <Eigen/Dense>

extern template class Eigen::BDCSVD<Eigen::MatrixXd>;
extern template class Eigen::JacobiSVD<Eigen::MatrixXd>;
extern template class Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>;
extern template class Eigen::HouseholderQR<Eigen::MatrixXd>;
