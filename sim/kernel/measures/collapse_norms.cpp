#include "kernel/measures/collapse_norms.hpp"

#include <cmath>

namespace rcsim {

double composite_norm(const Eigen::Ref<const Matrix>& M) {
  const double norm_1 = M.cwiseAbs().colwise().sum().maxCoeff();
  const double norm_inf = M.cwiseAbs().rowwise().sum().maxCoeff();
  return std::sqrt(norm_1 * norm_inf);
}

double dong_residual(const Eigen::Ref<const Matrix>& X) { return composite_norm(X.rowwise() - X.colwise().mean()); }

double effective_rank(const Vector& sigma) {
  const double total = sigma.sum();
  if (!(total > 0.0)) return 0.0;
  double entropy = 0.0;
  for (Eigen::Index i = 0; i < sigma.size(); ++i) {
    const double p = sigma(i) / total;
    if (p > 0.0) entropy -= p * std::log(p);
  }
  return std::exp(entropy);
}

}  // namespace rcsim
