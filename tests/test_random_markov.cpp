// Random-Markov attention (attention.kind = random_markov; docs/science/model-spec.md section 6, Mind the Gap):
// A = softmax(G) on the mask, G i.i.d. N(0, 1) drawn with the layer's weights, independent of X.
#include <catch2/catch.hpp>

#include <cmath>

#include "config/config.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/block/layer.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/model/random.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/model/weights.hpp"

using namespace rcsim;

TEST_CASE("random-Markov attention is the masked softmax of G, whatever X", "[attention][random_markov]") {
  const Config c = make_config({{"attention.kind", "random_markov"}, {"mask.type", "causal"}, {"model.tokens", "4"},
                                {"model.dim", "3"}, {"residual.alpha", "0"}});
  const MaskMatrix mask = make_mask(c, nullptr);
  const Normalization norm = Normalization::from_config(c);
  LayerParams p = layer_params(c, &mask, &norm);
  p.keep_attention = true;
  LayerWeights w;
  RandomStream rng(5, 0);
  Matrix G(4, 4);
  rng.fill_normal(G);
  w.logits = {G};
  w.q = {Matrix::Identity(3, 3)};
  w.k = {Matrix::Identity(3, 3)};
  w.v = {Matrix::Identity(3, 3)};
  // By hand: row i is exp(G_ij) / sum_{j <= i} exp(G_ij) on j <= i (causal), 0 above.
  Matrix expected = Matrix::Zero(4, 4);
  for (int i = 0; i < 4; ++i) {
    double z = 0;
    for (int j = 0; j <= i; ++j) z += std::exp(G(i, j));
    for (int j = 0; j <= i; ++j) expected(i, j) = std::exp(G(i, j)) / z;
  }
  LayerWorkspace ws(4, 3, 3);
  Matrix X1(4, 3), X2(4, 3), Y1, Y2;
  rng.fill_normal(X1);
  rng.fill_normal(X2);
  attention_layer(X1, w, p, ws, Y1);
  const Matrix A1 = ws.attention_mean;
  attention_layer(X2, w, p, ws, Y2);
  CHECK((A1 - expected).cwiseAbs().maxCoeff() < 1e-15);
  CHECK(ws.attention_mean == A1);  // independent of X
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) CHECK(A1(i, j) == 0.0);  // masked: exactly 0
  CHECK((Y1 - A1 * X1).cwiseAbs().maxCoeff() < 1e-14);  // W_V = I, no residual: Y = A X
}

TEST_CASE("products of random-Markov attention collapse the tokens to one", "[attention][random_markov]") {
  // Pure attention with W_V = I: X(t) = A(t-1) ... A(0) X(0), a product of i.i.d. random stochastic
  // matrices with positive entries, which contracts geometrically: mu_rel -> 0.
  const Config c = make_config({{"attention.kind", "random_markov"}, {"model.tokens", "8"}, {"model.dim", "4"},
                                {"model.layers", "60"}, {"weights.v", "identity"}, {"run.trials", "3"}});
  const RunResults r = run_simulation(prepare(c, nullptr, {}), 1);
  std::size_t mu_rel = 0;
  while (std::string(r.token_info[mu_rel].name) != "mu_rel") ++mu_rel;
  for (int t = 0; t < 3; ++t) {
    CHECK(r.token[mu_rel](t, 0) > 0.1);
    CHECK(r.token[mu_rel](t, r.token[mu_rel].cols() - 1) < 1e-8);
  }
  // The reverse pass covers random-Markov attention (tests/test_backward_attention.cpp, [particles]).
  CHECK_NOTHROW(prepare(make_config({{"attention.kind", "random_markov"}, {"output.measures", "grad_x_norm"}}),
                        nullptr, {}));
}
