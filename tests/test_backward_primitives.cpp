// The adjoints of the primitives against finite differences: softmax and USA, the normalisations
// (input, gain, bias), the MLP's activations; the forward signal statistics and the readout cotangent.
#include "backward_support.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

TEST_CASE("softmax adjoint: FD, masked logits get exactly 0, rows of dS sum to 0", "[backward]") {
  RandomStream rng(7, 0);
  const int n = 5;
  double worst = 0.0;
  for (const std::string type : {"complete", "causal", "window", "custom"}) {
    const MaskMatrix mask = backward_test_mask(type, n);
    Matrix S = gaussian(n, n, rng);
    const Matrix C = gaussian(n, n, rng);  // L = sum(C .* softmax(S))
    const auto loss = [&] {
      Matrix A = S;
      masked_softmax(A, mask);
      return A.cwiseProduct(C).sum();
    };
    Matrix A = S;
    masked_softmax(A, mask);
    const Matrix dS = softmax_backward(A, C, mask);
    const Matrix fd = fd_gradient(S, loss);
    INFO("mask " << type);
    CHECK(rel_err(dS, fd) < kTol);
    worst = std::max(worst, rel_err(dS, fd));
    for (int i = 0; i < n; ++i) {
      CHECK(std::abs(dS.row(i).sum()) < 1e-14 * (1 + dS.row(i).cwiseAbs().sum()));
      for (int j = 0; j < n; ++j)
        if (!mask(i, j)) CHECK(dS(i, j) == 0.0);  // exactly, not to rounding
    }
    // The comparison can fail: a gradient off by 1e-4 in one entry is caught.
    Matrix wrong = dS;
    wrong(0, 0) += 1e-4 * (1 + std::abs(wrong(0, 0)));
    CHECK(rel_err(wrong, fd) > kTol);
  }
  WARN("softmax adjoint: largest relative error against FD " << worst);
}

TEST_CASE("USA adjoint against FD", "[backward]") {
  RandomStream rng(8, 0);
  const MaskMatrix mask = backward_test_mask("custom", 4);
  Matrix S = gaussian(4, 4, rng);
  const Matrix C = gaussian(4, 4, rng);
  const auto loss = [&] {
    Matrix A = S;
    usa_weights(A, mask);
    return A.cwiseProduct(C).sum();
  };
  Matrix A = S;
  usa_weights(A, mask);
  const Matrix dS = usa_backward(A, C, mask);
  CHECK(rel_err(dS, fd_gradient(S, loss)) < kTol);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      if (!mask(i, j)) CHECK(dS(i, j) == 0.0);
  // attention.usa_normalised: A = exp(S - c) / N; the same adjoint of the shifted weights (c = 2.5 here)
  const auto shifted_loss = [&] {
    Matrix B = S;
    usa_weights(B, mask, 2.5);
    return B.cwiseProduct(C).sum();
  };
  Matrix B = S;
  usa_weights(B, mask, 2.5);
  CHECK(rel_err(usa_backward(B, C, mask), fd_gradient(S, shifted_loss)) < kTol);
  CHECK(rel_err(usa_backward(A, C, mask), fd_gradient(S, shifted_loss)) > 0.5);  // the unshifted A fails
}

TEST_CASE("normalisation adjoints against FD (input, gain, bias)", "[backward]") {
  RandomStream rng(9, 0);
  double worst = 0.0;
  for (const NormType t : {NormType::none, NormType::sphere, NormType::projection, NormType::layernorm,
                           NormType::rmsnorm, NormType::dyt, NormType::derf}) {
    Normalization n(t, 4, 1e-5, {}, {}, 0.7);
    n.gain = RowVector::Ones(4) + gaussian(1, 4, rng, 0.3);
    n.bias = gaussian(1, 4, rng, 0.3);
    Matrix Y = gaussian(6, 4, rng);
    const Matrix C = gaussian(6, 4, rng);
    const auto loss = [&] {
      Matrix Z = Y;
      normalize_rows(Z, n);
      return Z.cwiseProduct(C).sum();
    };
    RowVector dg, db;
    const Matrix dY = norm_backward(Y, C, n, dg, db);
    INFO("norm " << norm_name(t));
    const Matrix fd = fd_gradient(Y, loss);
    CHECK(rel_err(dY, fd) < kTol);
    const Matrix fg = fd_gradient_row(n.gain, loss), fb = fd_gradient_row(n.bias, loss);
    worst = std::max({worst, rel_err(dY, fd), fg.norm() > 0 ? rel_err(dg, fg) : 0.0, fb.norm() > 0 ? rel_err(db, fb) : 0.0});
    CHECK((fg.norm() > 0 ? rel_err(dg, fg) : dg.norm()) < kTol);
    CHECK((fb.norm() > 0 ? rel_err(db, fb) : db.norm()) < kTol);
    Matrix wrong = dY;
    wrong(2, 1) += 1e-4 * (1 + dY.norm());
    CHECK(rel_err(wrong, fd) > kTol);
  }
  WARN("normalisation adjoints: largest relative error against FD " << worst);
}

TEST_CASE("MLP adjoint against FD for relu, gelu, gelu_tanh, tanh", "[backward]") {
  double worst = 0.0;
  for (const MlpActivation a :
       {MlpActivation::relu, MlpActivation::gelu, MlpActivation::gelu_tanh, MlpActivation::tanh}) {
    Case k;
    k.m = 6;
    RandomStream rng(10, static_cast<std::uint64_t>(a));
    LayerWeights w = random_weights(k, rng);
    Matrix X = gaussian(k.N, k.d, rng);
    const Matrix C = gaussian(k.N, k.d, rng);
    MlpWorkspace mws;
    const auto loss = [&] {
      Matrix out;
      mlp_forward(X, w, a, mws, out);
      return out.cwiseProduct(C).sum();
    };
    MlpGrads g;
    const Matrix dX = mlp_backward(X, w, a, C, g);
    const double errs[] = {rel_err(dX, fd_gradient(X, loss)), rel_err(g.d_in, fd_gradient(w.mlp_in, loss)),
                           rel_err(g.d_out, fd_gradient(w.mlp_out, loss)),
                           rel_err(g.d_in_bias, fd_gradient_row(w.mlp_in_bias, loss)),
                           rel_err(g.d_out_bias, fd_gradient_row(w.mlp_out_bias, loss))};
    for (const double e : errs) CHECK(e < kTol);
    worst = std::max(worst, *std::max_element(std::begin(errs), std::end(errs)));
  }
  WARN("MLP adjoints: largest relative error against FD " << worst);
}

TEST_CASE("signal statistics against hand-computed values", "[backward]") {
  Matrix X(3, 2);
  X << 1, 0, 0, 2, -3, 0;
  // cosines: (0,1) 0, (0,2) -1, (1,2) 0: mean over 6 ordered pairs = -2/6
  CHECK(cos_mean(X) == Approx(-1.0 / 3.0).epsilon(1e-15));
  // q = (1 + 4 + 9) / (3 * 2); p: <x0,x1> 0, <x0,x2> -3, <x1,x2> 0 -> 2 * (-3) / (6 * 2)
  CHECK(gram_q(X) == Approx(14.0 / 6.0).epsilon(1e-15));
  CHECK(gram_p(X) == Approx(-0.5).epsilon(1e-15));
  // |x| = 1, 0, 0, 2, 3, 0 -> sorted 0 0 0 1 2 3, median (0 + 1) / 2, max 3
  CHECK(massive_ratio(X) == Approx(6.0).epsilon(1e-15));
  Matrix Y = X;
  Y(0, 0) = 4;  // ||Y - X|| = 3, ||X|| = sqrt(14)
  CHECK(update_size(X, Y) == Approx(3.0 / std::sqrt(14.0)).epsilon(1e-15));
  CHECK(std::isnan(cos_mean(X.topRows(1))));
}

TEST_CASE("readout: the cotangent of L = 1^T X R, and a stream of its own", "[backward]") {
  ModelSpec c;
  c.model.dim = 3;
  const Vector R0 = readout(c, 0), R1 = readout(c, 1);
  CHECK(R0.size() == 3);
  CHECK((R0 - R1).norm() > 0);
  CHECK((readout(c, 0) - R0).norm() == 0.0);
  RandomStream rng(1, 2);
  Matrix X = gaussian(4, 3, rng);
  const auto loss = [&] { return (X * R0).sum(); };
  CHECK(rel_err(readout_cotangent(4, R0), fd_gradient(X, loss)) < kTol);
}
