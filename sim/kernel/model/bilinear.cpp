#include "kernel/model/bilinear.hpp"

#include <cmath>

namespace rcsim {

void draw_bilinear(BilinearType type, int d, RandomStream& rng, Matrix& B) {
  const double sd = std::sqrt(static_cast<double>(d));
  Matrix G(d, d);
  switch (type) {
    case BilinearType::gaussian_product: {
      Matrix G2(d, d);
      rng.fill_normal(G);
      rng.fill_normal(G2);
      B.noalias() = G * G2 / sd;
      return;
    }
    case BilinearType::symmetric:
    case BilinearType::goe:
      rng.fill_normal(G);
      B = (G + G.transpose()) / std::sqrt(type == BilinearType::goe ? 2.0 * d : 2.0);
      return;
    case BilinearType::wigner:
      rng.fill_normal(G);
      B = G.selfadjointView<Eigen::Upper>();
      return;
    case BilinearType::identity:
      B.setIdentity(d, d);
      return;
    case BilinearType::none:
      break;
  }
  B.resize(0, 0);
}

void draw_wishart(int d, RandomStream& rng, Matrix& V) {
  Matrix G(d, d);
  rng.fill_normal(G);
  V.noalias() = G * G.transpose() / std::sqrt(static_cast<double>(d));
}

}  // namespace rcsim
