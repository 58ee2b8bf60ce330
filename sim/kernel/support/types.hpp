// Common matrix types. Tokens are the rows of an N x d matrix (row-vector convention: x -> x W).
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "kernel/support/eigen_instances.hpp"  // the decompositions, compiled once

namespace rcsim {

using Matrix = Eigen::MatrixXd;
using Vector = Eigen::VectorXd;
using RowVector = Eigen::RowVectorXd;
// Attention mask: entry (i, j) is 1 iff token i may attend to token j.
using MaskMatrix = Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic>;
// Row-major matrix, the memory order of HDF5 datasets.
using RowMajorMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The same for a scalar type T (double, or float for run.precision = float32).
template <class T>
using MatrixT = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using VectorT = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <class T>
using RowVectorT = Eigen::Matrix<T, 1, Eigen::Dynamic>;
template <class T>
using RowMajorMatrixT = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixF = MatrixT<float>;

// A dense array of any rank: its shape and its values in C order (row-major, as HDF5 and NumPy
// store them). Extent is HDF5's hsize_t type, so that the io layer passes shapes through unchanged.
using Extent = unsigned long long;
using Extents = std::vector<Extent>;
struct NdArray {
  Extents shape;
  std::vector<double> data;
};

}  // namespace rcsim
