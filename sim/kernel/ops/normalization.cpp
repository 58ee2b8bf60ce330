#include "kernel/ops/normalization.hpp"

#include <cmath>
#include <limits>

#include "kernel/support/errors.hpp"

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

}  // namespace


namespace {

bool is_pointwise(NormType t) { return t == NormType::dyt || t == NormType::derf; }

// dyt: f = tanh; derf: f = erf. The map of u = a y and its derivative f'(u).
template <class T>
MatrixT<T> pointwise_value(NormType t, const MatrixT<T>& U) {
  if (t == NormType::dyt) return U.unaryExpr([](T u) { return std::tanh(u); });
  return U.unaryExpr([](T u) { return std::erf(u); });
}
template <class T>
MatrixT<T> pointwise_slope(NormType t, const MatrixT<T>& U) {
  if (t == NormType::dyt)
    return U.unaryExpr([](T u) {
      const T th = std::tanh(u);
      return T(1) - th * th;
    });
  const T two_over_sqrt_pi = static_cast<T>(1.1283791670955126);  // 2 / sqrt(pi)
  return U.unaryExpr([two_over_sqrt_pi](T u) { return two_over_sqrt_pi * std::exp(-u * u); });
}

// dyt, derf: Y <- g f(a Y) + b elementwise (no degenerate rows).
template <class T>
int pointwise_rows(Eigen::Ref<MatrixT<T>> Y, const Normalization& norm) {
  const MatrixT<T> U = static_cast<T>(norm.alpha) * Y;
  Y = pointwise_value<T>(norm.type, U);
  Y.array().rowwise() *= norm.gain.template cast<T>().array();
  Y.rowwise() += norm.bias.template cast<T>();
  return 0;
}

template <class T>
int normalize_impl(Eigen::Ref<MatrixT<T>> Y, const Normalization& norm) {
  if (norm.type == NormType::none) return 0;
  if (is_pointwise(norm.type)) return pointwise_rows<T>(Y, norm);
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
      case NormType::none: case NormType::dyt: case NormType::derf: break;  // handled above
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

// ---- adjoint and tangent ----

namespace {

// 1 / sqrt(r^2 / d + eps) as normalize_rows computes it (exact sqrt(d) / r for eps = 0).
template <class T>
T inverse_rms_t(T r, T d, T eps) {
  if (eps == T(0)) return std::sqrt(d) / r;
  return T(1) / std::sqrt(r * r / d + eps);
}

// xhat = c inv(c), inv = (||c||^2 / d + eps)^(-1/2): the map dc -> inv (dc - xhat (xhat . dc) / d)
// is its tangent and (being symmetric) its adjoint.
template <class T>
RowVectorT<T> scaled_map(const RowVectorT<T>& xhat, T inv, const RowVectorT<T>& dc) {
  const T d = static_cast<T>(xhat.size());
  return inv * (dc - xhat * (xhat.dot(dc) / d));
}

}  // namespace

template <class T>
MatrixT<T> norm_backward(const MatrixT<T>& Y, const MatrixT<T>& dOut, const Normalization& norm, RowVectorT<T>& dgain,
                         RowVectorT<T>& dbias) {
  const Eigen::Index n = Y.rows(), dd = Y.cols();
  const T d = static_cast<T>(dd), tiny = std::numeric_limits<T>::min();
  const T eps = static_cast<T>(norm.eps);
  const RowVectorT<T> gain = norm.gain.template cast<T>();
  if (dgain.size() != dd) dgain = RowVectorT<T>::Zero(dd);
  if (dbias.size() != dd) dbias = RowVectorT<T>::Zero(dd);
  if (norm.type == NormType::none) return dOut;
  if (is_pointwise(norm.type)) {  // out = g f(a y) + b: dy = a f'(a y) g dOut, dg = f(a y) dOut, db = dOut
    const T a = static_cast<T>(norm.alpha);
    const MatrixT<T> U = a * Y;
    dgain += pointwise_value<T>(norm.type, U).cwiseProduct(dOut).colwise().sum();
    dbias += dOut.colwise().sum();
    MatrixT<T> dY = a * pointwise_slope<T>(norm.type, U).cwiseProduct(dOut);
    dY.array().rowwise() *= gain.array();
    return dY;
  }
  MatrixT<T> dY = MatrixT<T>::Zero(n, dd);
  for (Eigen::Index i = 0; i < n; ++i) {
    const RowVectorT<T> y = Y.row(i), g = dOut.row(i);
    switch (norm.type) {
      case NormType::none: case NormType::dyt: case NormType::derf: break;  // handled above
      case NormType::sphere: {  // out = y / ||y||: dy = (g - u (u . g)) / ||y||, u = y / ||y||
        const T r = y.norm();
        if (r < tiny) break;
        const RowVectorT<T> u = y / r;
        dY.row(i) = (g - u * u.dot(g)) / r;
        break;
      }
      case NormType::projection:  // out = y - mean(y): dy = g - mean(g)
        dY.row(i) = g.array() - g.mean();
        break;
      case NormType::layernorm: {  // out = gain xhat + b, xhat = c inv, c = y - mean(y)
        dbias += g;
        const RowVectorT<T> c = y.array() - y.mean();
        const T r = c.norm();
        if (r < tiny) break;
        const T inv = inverse_rms_t<T>(r, d, eps);
        const RowVectorT<T> xhat = c * inv;
        dgain += g.cwiseProduct(xhat);
        const RowVectorT<T> dc = scaled_map<T>(xhat, inv, g.cwiseProduct(gain));
        dY.row(i) = dc.array() - dc.mean();
        break;
      }
      case NormType::rmsnorm: {  // out = gain xhat, xhat = y inv
        const T r = y.norm();
        if (r < tiny) break;
        const T inv = inverse_rms_t<T>(r, d, eps);
        const RowVectorT<T> xhat = y * inv;
        dgain += g.cwiseProduct(xhat);
        dY.row(i) = scaled_map<T>(xhat, inv, g.cwiseProduct(gain));
        break;
      }
    }
  }
  return dY;
}

template <class T>
MatrixT<T> norm_jvp(const MatrixT<T>& Y, const MatrixT<T>& dY, const Normalization& norm) {
  const Eigen::Index n = Y.rows(), dd = Y.cols();
  const T d = static_cast<T>(dd), tiny = std::numeric_limits<T>::min();
  const T eps = static_cast<T>(norm.eps);
  if (norm.type == NormType::none) return dY;
  const RowVectorT<T> gain = norm.gain.template cast<T>();
  if (is_pointwise(norm.type)) {  // d out = g a f'(a y) dy
    const T a = static_cast<T>(norm.alpha);
    MatrixT<T> dOut = a * pointwise_slope<T>(norm.type, MatrixT<T>(a * Y)).cwiseProduct(dY);
    dOut.array().rowwise() *= gain.array();
    return dOut;
  }
  MatrixT<T> dOut = MatrixT<T>::Zero(n, dd);
  for (Eigen::Index i = 0; i < n; ++i) {
    const RowVectorT<T> y = Y.row(i), dy = dY.row(i);
    switch (norm.type) {
      case NormType::none: case NormType::dyt: case NormType::derf: break;  // handled above
      case NormType::sphere: {  // out = y / r: d out = (dy - u (u . dy)) / r, u = y / r
        const T r = y.norm();
        if (r < tiny) break;
        const RowVectorT<T> u = y / r;
        dOut.row(i) = (dy - u * u.dot(dy)) / r;
        break;
      }
      case NormType::projection:  // out = y - mean(y)
        dOut.row(i) = dy.array() - dy.mean();
        break;
      case NormType::layernorm: {  // out = gain .* xhat + b, xhat = c inv, c = y - mean(y); b constant
        const RowVectorT<T> c = y.array() - y.mean();
        const T r = c.norm();
        if (r < tiny) break;
        const T inv = inverse_rms_t<T>(r, d, eps);
        const RowVectorT<T> dc = dy.array() - dy.mean();
        dOut.row(i) = scaled_map<T>(c * inv, inv, dc).cwiseProduct(gain);
        break;
      }
      case NormType::rmsnorm: {  // out = gain .* xhat, xhat = y inv
        const T r = y.norm();
        if (r < tiny) break;
        const T inv = inverse_rms_t<T>(r, d, eps);
        dOut.row(i) = scaled_map<T>(y * inv, inv, dy).cwiseProduct(gain);
        break;
      }
    }
  }
  return dOut;
}

// Adjoint of y -> s y / |y|: dy = s (g - u (u . g)) / |y|, u = y / |y|; the tangent has the same form.
template <class T>
MatrixT<T> scaled_sphere_backward(const MatrixT<T>& Y, const MatrixT<T>& G, T s) {
  MatrixT<T> dY = MatrixT<T>::Zero(Y.rows(), Y.cols());
  for (Eigen::Index i = 0; i < Y.rows(); ++i) {
    const T r = Y.row(i).norm();
    if (r == 0.0) continue;
    const RowVectorT<T> u = Y.row(i) / r;
    dY.row(i) = (s / r) * (G.row(i) - u * u.dot(G.row(i)));
  }
  return dY;
}

template <class T>
MatrixT<T> scaled_sphere_jvp(const MatrixT<T>& Y, const MatrixT<T>& dY, T s) {
  return scaled_sphere_backward<T>(Y, dY, s);  // the map is symmetric
}

#define RCSIM_NORM_OPS(T)                                                                                      \
  template MatrixT<T> norm_backward<T>(const MatrixT<T>&, const MatrixT<T>&, const Normalization&, RowVectorT<T>&, \
                                       RowVectorT<T>&);                                                        \
  template MatrixT<T> norm_jvp<T>(const MatrixT<T>&, const MatrixT<T>&, const Normalization&);                 \
  template MatrixT<T> scaled_sphere_backward<T>(const MatrixT<T>&, const MatrixT<T>&, T);                      \
  template MatrixT<T> scaled_sphere_jvp<T>(const MatrixT<T>&, const MatrixT<T>&, T);
RCSIM_NORM_OPS(double)
RCSIM_NORM_OPS(float)
#undef RCSIM_NORM_OPS

}  // namespace rcsim
