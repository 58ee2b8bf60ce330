#include "random.hpp"

#include <cmath>

namespace rcsim {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

RandomStream::RandomStream(std::uint64_t seed, std::uint64_t trial, std::uint64_t stream) {
  // std::seed_seq and std::mt19937_64 are specified exactly by the standard.
  const std::uint64_t a = splitmix64(seed);
  const std::uint64_t b = splitmix64(a ^ splitmix64(trial + 0x1234567ULL));
  const std::uint64_t c = splitmix64(b ^ splitmix64(stream + 0x7654321ULL));
  std::seed_seq seq{static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(a >> 32),
                    static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32),
                    static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c >> 32)};
  engine_.seed(seq);
}

double RandomStream::uniform() {
  // (k + 0.5) / 2^53 with k uniform in [0, 2^53): never 0 or 1.
  const std::uint64_t k = engine_() >> 11;
  return (static_cast<double>(k) + 0.5) * 0x1.0p-53;
}

double RandomStream::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = uniform();
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * M_PI * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

void RandomStream::fill_normal(Eigen::Ref<Matrix> m, double std) {
  // Row by row, so the order of draws is the order of the row-major HDF5 layout.
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) m(i, j) = std * normal();
}

Matrix RandomStream::haar_orthogonal(Eigen::Index rows, Eigen::Index cols) {
  const bool tall = rows >= cols;
  const Eigen::Index n = tall ? rows : cols, k = tall ? cols : rows;
  Matrix g(n, k);
  fill_normal(g);
  Eigen::HouseholderQR<Matrix> qr(g);
  Matrix q = qr.householderQ() * Matrix::Identity(n, k);
  const Matrix& r = qr.matrixQR();
  for (Eigen::Index j = 0; j < k; ++j)
    if (r(j, j) < 0) q.col(j) = -q.col(j);
  if (tall) return q;
  return q.transpose();
}

}  // namespace rcsim
