#include "kernel/model/random.hpp"

#include <cmath>
#include <cstring>

namespace rcsim {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

RandomStream::RandomStream(std::uint64_t seed, std::uint64_t trial, std::uint64_t stream) {
  // The 256-bit state is four SplitMix64 outputs of the mixed (seed, trial, stream) (the seeding
  // recommended by xoshiro's authors; never all zero in practice, and checked).
  const std::uint64_t a = splitmix64(seed);
  const std::uint64_t b = splitmix64(a ^ splitmix64(trial + 0x1234567ULL));
  std::uint64_t x = splitmix64(b ^ splitmix64(stream + 0x7654321ULL));
  for (auto& word : state_) {
    x += 0x9E3779B97F4A7C15ULL;
    word = splitmix64(x);
  }
  if ((state_[0] | state_[1] | state_[2] | state_[3]) == 0) state_[0] = 1;
}

double RandomStream::uniform() {
  // (k + 0.5) / 2^53 with k uniform in [0, 2^53): never 0 or 1.
  const std::uint64_t k = next() >> 11;
  return (static_cast<double>(k) + 0.5) * 0x1.0p-53;
}

namespace {
// Tables of the 256-layer ziggurat for the standard normal density (Marsaglia and Tsang 2000,
// with Doornik's 2005 fix: the layer index and the abscissa use disjoint bits of one draw).
// Abscissae are 52-bit integers scaled by w[i]; k[i] is the acceptance bound of layer i.
struct Ziggurat {
  static constexpr double r = 3.6541528853610088;  // start of the tail
  static constexpr double v = 0.00492867323399;    // area of every layer
  std::uint64_t k[256];
  double w[256], f[256];
  Ziggurat() {
    const double m = 0x1.0p52;
    double dn = r, tn = r;
    const double q = v / std::exp(-0.5 * dn * dn);
    k[0] = static_cast<std::uint64_t>((dn / q) * m);
    k[1] = 0;
    w[0] = q / m;
    w[255] = dn / m;
    f[0] = 1.0;
    f[255] = std::exp(-0.5 * dn * dn);
    for (int i = 254; i >= 1; --i) {
      dn = std::sqrt(-2.0 * std::log(v / dn + std::exp(-0.5 * dn * dn)));
      k[i + 1] = static_cast<std::uint64_t>((dn / tn) * m);
      tn = dn;
      f[i] = std::exp(-0.5 * dn * dn);
      w[i] = dn / m;
    }
  }
};
const Ziggurat zig;
}  // namespace

double RandomStream::normal() {
  // Fast path inline: the rectangle of the layer selected by the low 8 bits (about 99%).
  const std::uint64_t bits = next();
  const int layer = static_cast<int>(bits & 0xff);
  const std::uint64_t a = (bits >> 9) & 0x000fffffffffffffULL;  // 52 bits above the sign bit
  if (a < zig.k[layer]) {
    // The sign from bit 8, without a branch (a mispredicted branch would cost more than the rest).
    const double x = static_cast<double>(a) * zig.w[layer];
    std::uint64_t xb;
    std::memcpy(&xb, &x, sizeof xb);
    xb ^= (bits & 0x100) << 55;
    double y;
    std::memcpy(&y, &xb, sizeof y);
    return y;
  }
  return normal_slow(bits);
}

double RandomStream::normal_slow(std::uint64_t bits) {
  for (;;) {
    const int layer = static_cast<int>(bits & 0xff);
    const bool negative = (bits >> 8) & 1;
    const std::uint64_t a = (bits >> 9) & 0x000fffffffffffffULL;
    double x = static_cast<double>(a) * zig.w[layer];
    if (negative) x = -x;
    if (a < zig.k[layer]) return x;
    if (layer == 0) {
      // The tail beyond r (Marsaglia 1964).
      for (;;) {
        const double xx = -std::log(uniform()) / Ziggurat::r;
        const double yy = -std::log(uniform());
        if (yy + yy > xx * xx) return negative ? -(Ziggurat::r + xx) : Ziggurat::r + xx;
      }
    }
    // The wedge between the rectangle and the density.
    if ((zig.f[layer - 1] - zig.f[layer]) * uniform() + zig.f[layer] < std::exp(-0.5 * x * x)) return x;
    bits = next();
  }
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
