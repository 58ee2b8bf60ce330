#include "kernel/ops/rotary.hpp"

#include <cmath>

namespace rcsim {

namespace {
// The rotation by sign * phi (sign +1: apply_rotary; -1: its transpose).
template <class T>
void rotate(MatrixT<T>& X, int head_size, int first_position, double theta, double sign) {
  const int pairs = head_size / 2;
  for (int j = 0; j < pairs; ++j) {
    // The angle in double; the rotation in T (float32 runs round cos and sin to float).
    const double frequency = std::pow(theta, -2.0 * j / head_size);
    for (Eigen::Index i = 0; i < X.rows(); ++i) {
      const double phi = static_cast<double>(first_position + i) * frequency;
      const T c = static_cast<T>(std::cos(phi)), s = static_cast<T>(sign * std::sin(phi));
      for (Eigen::Index col = 2 * j; col < X.cols(); col += head_size) {
        const T a = X(i, col), b = X(i, col + 1);
        X(i, col) = a * c - b * s;
        X(i, col + 1) = a * s + b * c;
      }
    }
  }
}

}  // namespace

template <class T>
void apply_rotary(MatrixT<T>& X, int head_size, int first_position, double theta) {
  rotate(X, head_size, first_position, theta, 1.0);
}

template <class T>
void apply_rotary_transpose(MatrixT<T>& X, int head_size, int first_position, double theta) {
  rotate(X, head_size, first_position, theta, -1.0);
}

template void apply_rotary(MatrixT<double>&, int, int, double);
template void apply_rotary_transpose(MatrixT<double>&, int, int, double);
template void apply_rotary_transpose(MatrixT<float>&, int, int, double);
template void apply_rotary(MatrixT<float>&, int, int, double);

}  // namespace rcsim
