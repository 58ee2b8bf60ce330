// Grouped-query attention in random-weight runs (model.kv_heads; kernel/model/kv_heads.hpp): the
// default is today's run bitwise, the stream mapping of the draws, kv_heads = 1 against a run whose
// heads all read one W_K, W_V from arrays (an independent construction), the shared heads' gradients
// against finite differences of the shared matrices, the fused cpu platform, and hostile values.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "backward_support.hpp"
#include "kernel/model/host_arrays.hpp"
#include "kernel/model/kv_heads.hpp"
#include "kernel/trial/engine_setup.hpp"
#include "sim_support.hpp"

using namespace rcsim;
using namespace rcsim::backward_test;

namespace {

// A small multi-head run: N = 5, d = 4, H = 4, pre-LN with an MLP and W_O (model.value_dim).
std::map<std::string, std::string> gqa_keys() {
  return {{"model.tokens", "5"},   {"model.dim", "4"},        {"model.layers", "3"},      {"model.heads", "4"},
          {"model.value_dim", "3"}, {"mlp.width", "6"},       {"norm.type", "layernorm"}, {"norm.position", "pre"},
          {"mask.type", "causal"}, {"run.trials", "2"},       {"output.tokens", "all"},   {"run.seed", "77"}};
}

NdArray array_of(const std::vector<Matrix>& per_head, bool head_axis) {
  NdArray a;
  const auto r = static_cast<Extent>(per_head.front().rows()), c = static_cast<Extent>(per_head.front().cols());
  a.shape = head_axis ? Extents{static_cast<Extent>(per_head.size()), r, c} : Extents{r, c};
  for (const Matrix& m : per_head)
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) a.data.push_back(m(i, j));
  return a;
}

RunResults run_with_arrays(const std::map<std::string, std::string>& keys, std::map<std::string, NdArray> arrays) {
  const Config c = make_config(keys);
  return run_simulation(prepare(c, nullptr, input_arrays_from(c, std::move(arrays), "test arrays")), 1);
}

void require_same_snapshots(const RunResults& a, const RunResults& b) {
  REQUIRE(a.snapshots.size() == b.snapshots.size());
  for (std::size_t t = 0; t < a.snapshots.size(); ++t) {
    REQUIRE(a.snapshots[t].size() == b.snapshots[t].size());
    for (std::size_t l = 0; l < a.snapshots[t].size(); ++l) REQUIRE((a.snapshots[t][l].array() == b.snapshots[t][l].array()).all());
  }
}

}  // namespace

TEST_CASE("model.kv_heads = model.heads is the default run bitwise", "[kv_heads]") {
  auto keys = gqa_keys();
  const RunResults plain = test::simulate(keys);
  keys["model.kv_heads"] = "4";
  require_same_snapshots(test::simulate(keys), plain);
  keys["model.kv_heads"] = "2";  // and the grouping changes the run
  const RunResults grouped = test::simulate(keys);
  CHECK((grouped.snapshots[0].back() - plain.snapshots[0].back()).norm() > 1e-3);
}

TEST_CASE("model.kv_heads: key/value head j keeps the draws of query head j H / H_kv, every other draw as H_kv = H", "[kv_heads]") {
  auto keys = gqa_keys();
  keys["attention.bias"] = "false";
  const Config full = make_config(keys);
  keys["model.kv_heads"] = "2";
  const Config grouped = make_config(keys);
  const InputArrays none;
  WeightSampler a(full, none), b(grouped, none);
  RandomStream ra(5, 1), rb(5, 1);
  a.begin_trial(ra);
  b.begin_trial(rb);
  for (int layer = 0; layer < 2; ++layer) {
    const LayerWeights& wa = a.layer(layer, ra);
    const LayerWeights& wb = b.layer(layer, rb);
    CHECK(wb.kv_group == 2);
    for (std::size_t h = 0; h < 4; ++h) {
      const std::size_t first = h / 2 * 2;  // the first query head of h's group
      CHECK((wb.q[h].array() == wa.q[h].array()).all());
      CHECK((wb.k[h].array() == wa.k[first].array()).all());
      CHECK((wb.v[h].array() == wa.v[first].array()).all());
      CHECK((wb.o[h].array() == wa.o[h].array()).all());
    }
    CHECK((wb.k[1].array() != wa.k[1].array()).any());
    CHECK((wb.mlp_in.array() == wa.mlp_in.array()).all());
    CHECK((wb.mlp_out.array() == wa.mlp_out.array()).all());
  }
}

TEST_CASE("model.kv_heads = 1 equals a run whose heads all read one W_K and W_V", "[kv_heads]") {
  RandomStream rng(2026, 0);
  std::vector<Matrix> q, o;
  for (int h = 0; h < 4; ++h) q.push_back(gaussian(4, 4, rng, 0.6)), o.push_back(gaussian(3, 4, rng, 0.6));
  const Matrix K = gaussian(4, 4, rng, 0.6), V = gaussian(4, 3, rng, 0.6);
  auto keys = gqa_keys();
  for (const char* w : {"weights.q", "weights.k", "weights.v", "weights.o"}) keys[w] = "file";
  keys["model.layers"] = "2";
  keys["weights.shared"] = "true";
  keys["weights.file"] = "<arrays>";
  // The MHA run: four heads whose W_K, W_V are the same matrices, given per head.
  const RunResults tied = run_with_arrays(keys, {{"W_Q", array_of(q, true)},
                                                 {"W_K", array_of({K, K, K, K}, true)},
                                                 {"W_V", array_of({V, V, V, V}, true)},
                                                 {"W_O", array_of(o, true)}});
  keys["model.kv_heads"] = "1";  // one key/value head: W_K [d, d_k], W_V [d, d_v], no head axis
  const RunResults shared = run_with_arrays(
      keys, {{"W_Q", array_of(q, true)}, {"W_K", array_of({K}, false)}, {"W_V", array_of({V}, false)}, {"W_O", array_of(o, true)}});
  require_same_snapshots(shared, tied);
  // W_K of H_kv = 1 has no head axis ([3, 4, 4] is neither [d, d_k] nor [L, d, d_k] with L = 2);
  // with H_kv = 2 the axis is [2, ...], not [H, ...], and the message names model.kv_heads.
  const Config c = make_config(keys);
  CHECK_THROWS_WITH(input_arrays_from(c, {{"W_Q", array_of(q, true)}, {"W_K", array_of({K, K, K}, true)},
                                          {"W_V", array_of({V}, false)}, {"W_O", array_of(o, true)}}, "test arrays"),
                    Catch::Contains("W_K") && Catch::Contains("expected [4, 4] or [2, 4, 4]"));
  keys["model.kv_heads"] = "2";
  const Config c2 = make_config(keys);
  CHECK_THROWS_WITH(input_arrays_from(c2, {{"W_Q", array_of(q, true)}, {"W_K", array_of({K, K, K, K}, true)},
                                           {"W_V", array_of({V, V}, true)}, {"W_O", array_of(o, true)}}, "test arrays"),
                    Catch::Contains("W_K") && Catch::Contains("[2, 4, 4]") && Catch::Contains("model.kv_heads = 2"));
}

TEST_CASE("model.kv_heads: the shared heads' gradients against finite differences of the shared matrices", "[kv_heads][backward]") {
  for (const int variant : {0, 1, 2}) {  // float64; float32; differential attention (halves of d_k = 4)
    const bool single = variant == 1;
    Case k;
    k.H = 4, k.dk = variant == 2 ? 4 : 3, k.dv = 3, k.m = 5, k.attn_bias = true;
    RandomStream rng(31, 0);
    LayerWeights w = random_weights(k, rng);
    share_kv_heads(w, 2);
    Fixture f(k, backward_test_mask("causal", k.N));
    f.p.layer.attention.differential = variant == 2;
    const Matrix X = gaussian(k.N, k.d, rng), C = gaussian(k.N, k.d, rng), Vt = gaussian(k.N, k.d, rng);
    if (single) {  // run.precision = float32: the float adjoint against the double FD (float tolerance)
      f.p.single = true;
      BlockGrads g;
      block_backward(X, w, f.p, C, g);
      f.p.single = false;
      BlockGrads g64;
      block_backward(X, w, f.p, C, g64);
      REQUIRE(g.dk.size() == 2);
      for (std::size_t j = 0; j < 2; ++j) {
        CHECK(rel_err(g.dk[j], g64.dk[j]) < 1e-4);
        CHECK(rel_err(g.dv[j], g64.dv[j]) < 1e-4);
      }
      continue;
    }
    const BlockDerivativeCheck r = check_block_derivatives(k, X, w, f.p, C, Vt);
    INFO("dX " << r.dX << " dW_Q " << r.dW_Q << " jvp " << r.jvp << " dot " << r.dot);
    CHECK(r.dX < kTol);
    CHECK(r.dW_Q < kTol);
    CHECK(r.jvp < kTol);
    CHECK(r.dot < 1e-12);
    const BlockGrads& g = r.grads;
    REQUIRE(g.dk.size() == 2);
    REQUIRE(g.dv.size() == 2);
    REQUIRE(g.dk_bias.size() == 2);
    REQUIRE(g.dq.size() == 4);
    const auto loss = [&] {
      Matrix next;
      BlockWorkspace bws(k.N, k.d, k.dk);
      transformer_block(X, w, f.p, bws, next);
      return next.cwiseProduct(C).sum();
    };
    for (int j = 0; j < 2; ++j) {  // kv head j: query heads 2j, 2j + 1 hold copies, perturbed together
      const auto h0 = static_cast<std::size_t>(2 * j), h1 = h0 + 1;
      const auto shared_fd = [&](auto& per_head) {  // FD in the shared matrix: both copies move
        Matrix M = per_head[h0];
        const Matrix fd = fd_gradient(M, [&] {
          per_head[h0] = M;
          per_head[h1] = M;
          return loss();
        });
        per_head[h0] = M;
        per_head[h1] = M;
        return fd;
      };
      const Matrix fd_k = shared_fd(w.k), fd_v = shared_fd(w.v), fd_bv = shared_fd(w.v_bias);
      CHECK(rel_err(g.dk[static_cast<std::size_t>(j)], fd_k) < kTol);
      CHECK(rel_err(g.dv[static_cast<std::size_t>(j)], fd_v) < kTol);
      CHECK(rel_err(g.dv_bias[static_cast<std::size_t>(j)], fd_bv) < kTol);
      // Not the gradient of one copy alone: the group's two copies both contribute.
      CHECK(rel_err(g.dk[static_cast<std::size_t>(j)], fd_gradient(w.k[h0], loss)) > 1e-2);
    }
  }
}

TEST_CASE("model.kv_heads: values that do not divide model.heads are refused, naming both", "[kv_heads][hostile]") {
  auto keys = gqa_keys();
  keys["model.kv_heads"] = "3";
  CHECK_THROWS_WITH(make_config(keys), Catch::Contains("model.kv_heads") && Catch::Contains("'3'") &&
                                           Catch::Contains("model.heads = 4"));
  keys["model.kv_heads"] = "8";
  CHECK_THROWS_WITH(make_config(keys), Catch::Contains("model.kv_heads") && Catch::Contains("model.heads = 4"));
  keys["model.kv_heads"] = "0";
  CHECK_THROWS_WITH(make_config(keys), Catch::Contains("model.kv_heads") && Catch::Contains(">= 1"));
  keys["model.kv_heads"] = "2";
  keys["model.value_dim"] = "0";
  keys["weights.v"] = "tied_qk";
  CHECK_THROWS_WITH(make_config(keys), Catch::Contains("weights.v") && Catch::Contains("model.kv_heads = 2"));
}
