// The one instantiation of the decompositions declared in eigen_instances.hpp.
#include "kernel/support/eigen_instances.hpp"

template class Eigen::BDCSVD<Eigen::MatrixXd>;
template class Eigen::JacobiSVD<Eigen::MatrixXd>;
template class Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>;
template class Eigen::HouseholderQR<Eigen::MatrixXd>;
