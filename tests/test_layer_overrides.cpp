// model.layer_overrides (docs/science/gradients.md, "Settings per layer range"): the key, its stored
// text (INI round trip, resume from a checkpoint) and every bad value (exit code 2, one message
// naming the key, the entry and what is allowed). The forward, the reverse pass against finite
// differences and the engine's bitwise equalities are in test_backward_blocks.cpp ([layers]).
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "app/run.hpp"
#include "config/config.hpp"
#include "io/checkpoint.hpp"
#include "io/hdf5_file.hpp"
#include "io/inputs.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/block/block.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/trial/simulation.hpp"
#include "kernel/trial/trial.hpp"

#include "cli_support.hpp"

using namespace rcsim;
namespace fs = std::filesystem;

namespace {
const std::map<std::string, std::string> kMixLn = {
    {"model.tokens", "5"},  {"model.dim", "3"},        {"model.layers", "6"},       {"run.trials", "3"},
    {"norm.type", "layernorm"}, {"norm.position", "pre"}, {"residual.alpha", "1"},  {"mlp.width", "4"},
    {"model.layer_overrides", "0-2:norm.position=post; 3-:norm.position=pre,mlp.activation=relu"}};
}  // namespace

TEST_CASE("model.layer_overrides: resolved ranges, stored only when set", "[keys][layers]") {
  CHECK(make_config({}).to_ini().find("layer_overrides") == std::string::npos);  // default runs unchanged
  CHECK(make_config({{"model.layer_overrides", "none"}}).layer_overrides.empty());
  const Config c = make_config(kMixLn);
  REQUIRE(c.layer_overrides.size() == 2);
  CHECK(c.layer_overrides[0].from == 0);
  CHECK(c.layer_overrides[0].to == 2);
  CHECK(c.layer_overrides[0].spec->norm.position == NormPosition::post);
  CHECK(c.layer_overrides[0].spec->mlp.activation == MlpActivation::gelu);  // the base's
  CHECK(c.layer_overrides[1].from == 3);
  CHECK(c.layer_overrides[1].to == 5);  // "3-": to the last block
  CHECK(c.layer_overrides[1].spec->mlp.activation == MlpActivation::relu);
  // One block alone, the temperature by beta, residual mixing resolved per range.
  const Config d = make_config({{"model.layers", "4"}, {"residual.alpha", "0.6"}, {"residual.mixing", "cowsik"},
                                {"model.layer_overrides", "2:model.beta=0.5,residual.alpha=0.8"}});
  REQUIRE(d.layer_overrides.size() == 1);
  CHECK(d.layer_overrides[0].from == 2);
  CHECK(d.layer_overrides[0].to == 2);
  CHECK(d.layer_overrides[0].spec->model.d_qk == 4.0);  // 1 / 0.5^2
  CHECK(d.layer_overrides[0].spec->residual_skip == Approx(0.6).epsilon(1e-15));  // sqrt(1 - 0.8^2)
  CHECK(d.residual_skip == Approx(0.8).epsilon(1e-15));  // the base: sqrt(1 - 0.6^2)
}

TEST_CASE("model.layer_overrides: one table per run, prepared once and shared by every trial", "[keys][layers]") {
  CHECK(prepare(make_config({})).per_layer.empty());
  const EngineSetup s = prepare(make_config(kMixLn));
  REQUIRE(s.per_layer.size() == 2);
  CHECK((s.per_layer[0].from == 0 && s.per_layer[0].to == 2 && s.per_layer[1].from == 3 && s.per_layer[1].to == 5));
  CHECK(s.per_layer[0].params.position == NormPosition::post);
  CHECK(s.per_layer[1].params.activation == MlpActivation::relu);
  Trial a(s, 0), b(s, 1);
  CHECK(a.params().per_layer == &s.per_layer);  // the setup's table, not a copy per trial
  CHECK(b.params().per_layer == &s.per_layer);
  CHECK(at_layer(a.params(), 4).activation == MlpActivation::relu);
  CHECK(at_layer(a.params(), 1).layer.norm == &s.per_layer[0].norm);
}

TEST_CASE("model.layer_overrides: the stored INI text reruns to the same configuration and results, and a run "
          "resumes from its checkpoint", "[keys][layers][checkpoint]") {
  const fs::path dir = test::fresh_dir("rcsim_layer_overrides");
  const std::string out = (dir / "mix.h5").string();
  auto keys = kMixLn;
  keys["output.file"] = out;
  const Config c = make_config(keys);
  const std::string ini = c.to_ini();
  CHECK(ini.find("layer_overrides = 0-2:norm.position=post; 3-:norm.position=pre,mlp.activation=relu") !=
        std::string::npos);
  test::write_text(dir / "stored.ini", ini);
  const Config again = make_config(parse_config_sources({}, (dir / "stored.ini").string()).values);
  CHECK(again.to_ini() == ini);
  REQUIRE(again.layer_overrides.size() == 2);
  CHECK(again.layer_overrides[1].spec->mlp.activation == MlpActivation::relu);
  const RunResults full = run_simulation(prepare(c), 1);
  {
    RunResults saved = full;
    Checkpoint cp(out + ".partial", ini, {});
    cp.completed(saved, 1);
    cp.flush(saved);
  }
  run_to_file(again, {"test", 1}, nullptr, false);
  CHECK_FALSE(fs::exists(out + ".partial"));
  const h5::File f = h5::File::open_read(out);
  CHECK(f.read_string("config") == ini);
  const h5::Array mu = f.read("metrics/mu");
  for (int t = 0; t < 3; ++t)
    for (int l = 0; l <= 6; ++l) CHECK(mu.data[static_cast<std::size_t>(t * 7 + l)] == full.token[0](t, l));
  // And the overrides matter: the run without them differs.
  auto plain = keys;
  plain.erase("model.layer_overrides");
  CHECK_FALSE(run_simulation(prepare(make_config(plain)), 1).token[0].cwiseEqual(full.token[0]).all());
}

TEST_CASE("model.layer_overrides: every bad value is a usage error naming the key, the entry and what is allowed",
          "[hostile][keys][layers]") {
  struct Bad {
    std::string value;
    std::vector<std::string> says;  // fragments of the message
    std::map<std::string, std::string> with = {};
  };
  const std::vector<Bad> bad = {
      {"0-1:norm.psition=pre", {"entry '0-1:norm.psition=pre'", "unknown key 'norm.psition'", "norm.position",
                                "keys allowed per layer: model.d_qk, model.beta"}},
      {"0-1:mask.type=causal", {"key 'mask.type' is not a setting that may differ by layer", "mlp.activation"}},
      {"0-1:model.layers=3", {"key 'model.layers' is not a setting that may differ by layer"}},
      {"0-1:norm.position=sideways", {"entry '0-1:norm.position=sideways'", "norm.position", "sideways",
                                      "post | pre | peri | ngpt"}},
      {"0-1:residual.alpha=abc", {"residual.alpha", "abc"}},
      {"0-1:model.d_qk=-2", {"model.d_qk", "-2", "> 0"}},
      {"0-1:mlp.activation=swish", {"mlp.activation", "swish", "relu | gelu | gelu_tanh | tanh"}},
      {"0-1:norm.type=batchnorm", {"norm.type", "batchnorm"}},
      {"3-1:norm.position=pre", {"empty range 3-1 (FROM must be <= TO)"}},
      {"0-9:norm.position=pre", {"block 9 is beyond the depth: blocks are 0 .. 3 (model.layers = 4)"}},
      {"4:norm.position=pre", {"block 4 is beyond the depth"}},
      {"x-2:norm.position=pre", {"block index 'x' is not an integer >= 0", "FROM-TO:key=value"}},
      {"-1-2:norm.position=pre", {"block index '' is not an integer >= 0"}},
      {"0-2:norm.position=pre; 2-3:norm.position=post",
       {"entry '2-3:norm.position=post'", "overlaps the range 0-2 of an earlier entry (ranges must be disjoint)"}},
      {"0-1 norm.position=pre", {"no ':' after the range", "FROM-TO:key=value"}},
      {"0-1:", {"no key=value after ':'"}},
      {"0-1:norm.position", {"'norm.position' is not key=value"}},
      {"0-1:norm.position=", {"key 'norm.position' has no value"}},
      {"0-1:norm.position=pre,norm.position=post", {"key 'norm.position' given twice"}},
      // The key's own cross-checks, for the range's settings.
      {"0-1:norm.position=post", {"entry '0-1:norm.position=post'", "norm.depth_scaling", "needs norm.position = pre"},
       {{"norm.position", "pre"}, {"norm.depth_scaling", "inv_sqrt_layer"}}},
      {"0-1:model.beta=0.5", {"model.beta", "model.d_qk", "disagree"}, {{"model.d_qk", "3"}}},
      {"0:residual.alpha=0", {"residual.mixing", "needs a residual"}, {{"residual.alpha", "0.5"}, {"residual.mixing", "cowsik"}}},
      // Settings the whole stack shares.
      {"0:norm.type=rmsnorm", {"norm.params = file", "cannot differ by layer"},
       {{"norm.type", "layernorm"}, {"norm.params", "file"}, {"weights.file", "w.h5"}}},
      {"0:residual.alpha=0.5", {"not with dynamics.noise > 0"}, {{"dynamics.noise", "0.1"}}},
  };
  const fs::path dir = test::fresh_dir("rcsim_layer_overrides_bad");
  const std::string out = (dir / "x.h5").string();
  for (const Bad& b : bad) {
    std::map<std::string, std::string> keys = {{"model.layers", "4"}, {"model.layer_overrides", b.value}};
    for (const auto& [k, v] : b.with) keys[k] = v;
    INFO("model.layer_overrides = " << b.value);
    const std::string msg = test::message_of([&] { make_config(keys); });
    INFO(msg);
    CHECK_THROWS_AS(make_config(keys), UsageError);
    CHECK(msg.rfind("key 'model.layer_overrides': ", 0) == 0);
    for (const auto& s : b.says) CHECK(msg.find(s) != std::string::npos);
    std::vector<std::string> args = {"run", "--quiet", "--output.file=" + out};
    for (const auto& [k, v] : keys) args.push_back("--" + k + "=" + v);
    CHECK(cli_main(args) == 2);
    CHECK_FALSE(fs::exists(out));
  }
}

// Every key declared per_layer works per range without code of its own: the range's BlockParams is
// block_params of the range's configuration. Softcap and temperature on blocks 0-1 give the tokens of
// a stack composed by hand from the parameters of two runs (one with the keys, one without), bitwise.
TEST_CASE("model.layer_overrides: any per-layer key (softcap, temperature) equals the hand-built composition",
          "[keys][layers]") {
  const std::map<std::string, std::string> base = {{"model.tokens", "5"}, {"model.dim", "4"}, {"model.layers", "4"},
                                                   {"model.heads", "2"},  {"norm.type", "layernorm"},
                                                   {"residual.alpha", "0.7"}};
  std::map<std::string, std::string> mixed_keys = base, first_keys = base;
  mixed_keys["model.layer_overrides"] = "0-1:attention.logit_softcap=0.6,model.d_qk=0.5";
  first_keys["attention.logit_softcap"] = "0.6";
  first_keys["model.d_qk"] = "0.5";
  const Config mixed = make_config(mixed_keys), first = make_config(first_keys), rest = make_config(base);
  const MaskMatrix mask = complete_mask(5);
  const Normalization norm = Normalization::from_config(rest);
  BlockParams p = block_params(mixed, &mask, &norm);
  const LayerSettings table = layer_settings(mixed);
  p.per_layer = &table;
  const BlockParams p_first = block_params(first, &mask, &norm), p_rest = block_params(rest, &mask, &norm);
  CHECK(at_layer(p, 1).layer.attention.logit_softcap == 0.6);  // the value reached the block
  CHECK(at_layer(p, 1).layer.d_qk == 0.5);
  CHECK(at_layer(p, 2).layer.attention.logit_softcap == 0.0);
  std::vector<LayerWeights> ws(4);
  for (auto& w : ws)
    for (int h = 0; h < 2; ++h) {
      w.q.push_back(Matrix::Random(4, 4) * 2.0);  // large logits: the cap acts
      w.k.push_back(Matrix::Random(4, 4) * 2.0);
      w.v.push_back(Matrix::Random(4, 4));
    }
  const Matrix X0 = Matrix::Random(5, 4);
  Matrix X = X0, Y = X0, Z = X0, next(5, 4);
  BlockWorkspace bws(5, 4, 4);
  for (int t = 0; t < 4; ++t) {
    const LayerWeights& w = ws[static_cast<std::size_t>(t)];
    transformer_block(X, w, at_layer(p, t), bws, next);
    X = next;
    transformer_block(Y, w, t < 2 ? p_first : p_rest, bws, next);  // by hand
    Y = next;
    transformer_block(Z, w, p_rest, bws, next);  // the base alone
    Z = next;
  }
  CHECK((X - Y).cwiseAbs().maxCoeff() == 0.0);
  CHECK((X - Z).norm() > 1e-3 * Z.norm());  // not trivially so: the keys act
}

TEST_CASE("model.layer_overrides: settings the weight sampler draws for cannot differ by range", "[keys][layers]") {
  std::map<std::string, std::string> keys = {{"model.layers", "4"},
                                             {"model.layer_overrides", "0:attention.kind=random_markov"}};
  CHECK_THROWS_WITH(make_config(keys), Catch::Contains("random_markov") && Catch::Contains("cannot differ by layer"));
  keys["model.layer_overrides"] = "0:attention.bias=true";
  CHECK_THROWS_WITH(make_config(keys), Catch::Contains("not a setting that may differ by layer"));
  keys["model.layer_overrides"] = "0-1:attention.kind=usa,attention.usa_normalised=true";  // now allowed
  CHECK(make_config(keys).layer_overrides.at(0).spec->attention.kind == AttentionKind::usa);
}
