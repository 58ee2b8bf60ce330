#include "kernel/normalization.hpp"

#include <cmath>
#include <limits>

#include "kernel/errors.hpp"

namespace rcsim {

namespace {
// ||y||, without the underflow of sqrt(sum y^2) for tiny entries.
template <class T>
T safe_norm(const Eigen::Ref<const RowVectorT<T>, 0, Eigen::InnerStride<>>& y) {
  const T sq = y.squaredNorm();
  if (sq >= std::numeric_limits<T>::min() && std::isfinite(sq)) return std::sqrt(sq);
  return y.stableNorm();
}

// 1 / sqrt(r^2 / d + eps), exact for eps = 0 even when r^2 would underflow.
template <class T>
T inverse_rms(T r, T d, double eps) {
  if (eps == 0.0) return std::sqrt(d) / r;
  return T(1) / std::sqrt(r * r / d + static_cast<T>(eps));
}

RowVector resolve(const std::vector<double>& v, int d, double neutral, const char* what) {
  if (v.empty()) return RowVector::Constant(d, neutral);
  if (v.size() == 1) return RowVector::Constant(d, v[0]);
  if (static_cast<int>(v.size()) != d)
    throw UsageError(std::string("norm.") + what + ": expected 1 or d = " + std::to_string(d) + " values");
  return Eigen::Map<const RowVector>(v.data(), d);
}
}  // namespace

Normalization::Normalization(NormType t, int d, double eps_, const std::vector<double>& g,
                             const std::vector<double>& b)
    : type(t), eps(eps_), gain(resolve(g, d, 1.0, "gain")), bias(resolve(b, d, 0.0, "bias")) {}

Normalization Normalization::from_config(const ModelSpec& c) {
  return Normalization(c.norm.type, c.model.dim, c.norm.eps, c.norm.gain, c.norm.bias);
}

namespace {

template <class T>
int normalize_impl(Eigen::Ref<MatrixT<T>> Y, const Normalization& norm) {
  if (norm.type == NormType::none) return 0;
  constexpr T tiny = std::numeric_limits<T>::min();
  const Eigen::Index n = Y.rows();
  const T d = static_cast<T>(Y.cols());
  // The parameters in T (no rounding for double).
  const RowVectorT<T> gain = norm.gain.template cast<T>(), bias = norm.bias.template cast<T>();
  int degenerate = 0;
  if (norm.type == NormType::layernorm) {
    // Column by column (Eigen stores columns contiguously, so every step is vectorised over the
    // rows); the same formulas as the row loop below. A degenerate row gets the factor 0, so
    // its output is 0 * g + b = b exactly.
    thread_local VectorT<T> factor;
    factor = Y.rowwise().mean();
    Y.colwise() -= factor;
    factor = Y.rowwise().squaredNorm();
    for (Eigen::Index i = 0; i < n; ++i) {
      const T sq = factor(i);
      const T r = sq >= tiny && sq <= std::numeric_limits<T>::max() ? std::sqrt(sq) : safe_norm<T>(Y.row(i));
      if (r < tiny) {
        ++degenerate;
        factor(i) = 0;
      } else {
        factor(i) = inverse_rms<T>(r, d, norm.eps);
      }
    }
    Y = factor.asDiagonal() * Y;
    Y.array().rowwise() *= gain.array();
    Y.rowwise() += bias;
    return degenerate;
  }
  for (Eigen::Index i = 0; i < n; ++i) {
    auto y = Y.row(i);
    switch (norm.type) {
      case NormType::none: break;
      case NormType::sphere: {
        const T r = safe_norm<T>(y);
        if (r < tiny) {
          ++degenerate;
          y.setZero();
        } else {
          y /= r;
        }
        break;
      }
      case NormType::projection: {
        y.array() -= y.mean();
        if (safe_norm<T>(y) < tiny) ++degenerate;
        break;
      }
      case NormType::layernorm: {
        y.array() -= y.mean();
        const T r = safe_norm<T>(y);
        if (r < tiny) {
          ++degenerate;
          y = bias;
        } else {
          const T inv = inverse_rms<T>(r, d, norm.eps);
          y = (y.array() * inv * gain.array() + bias.array()).matrix();
        }
        break;
      }
      case NormType::rmsnorm: {
        const T r = safe_norm<T>(y);
        if (r < tiny) {
          ++degenerate;
          y.setZero();
        } else {
          const T inv = inverse_rms<T>(r, d, norm.eps);
          y = (y.array() * inv * gain.array()).matrix();
        }
        break;
      }
    }
  }
  return degenerate;
}

}  // namespace

int normalize_rows(Eigen::Ref<Matrix> Y, const Normalization& norm) { return normalize_impl<double>(Y, norm); }
int normalize_rows(Eigen::Ref<MatrixF> Y, const Normalization& norm) { return normalize_impl<float>(Y, norm); }

}  // namespace rcsim
