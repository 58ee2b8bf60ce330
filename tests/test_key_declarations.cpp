// The key declarations (sim/config/keys.cpp): each key declared once drives parsing, validation
// messages, --help-keys, the stored INI text and the docs table (ctest docs_key_table).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "config/config.hpp"
#include "kernel/support/errors.hpp"

using namespace rcsim;
using Catch::Matchers::Contains;

namespace {
// make_config with one key changed (and what that key needs to be meaningful).
Config with(const std::string& key, const std::string& value) {
  std::map<std::string, std::string> v = {{key, value}};
  if (key.rfind("weights.o", 0) == 0) v["model.value_dim"] = "4";
  if (key.rfind("weights.mlp", 0) == 0) v["mlp.width"] = "3";
  if (key == "weights.mlp_in_bias_std" || key == "weights.mlp_out_bias_std") v["mlp.bias"] = "true";
  return make_config(v);
}
}  // namespace

TEST_CASE("key declarations: unique names, defaults valid, sections as in the INI", "[keys][config]") {
  std::set<std::string> names;
  for (const auto& k : config_keys()) {
    INFO(k.key);
    CHECK(names.insert(k.key).second);
    CHECK(k.key.find('.') != std::string::npos);
    CHECK(!k.help.empty());
    CHECK(!k.allowed().empty());
    if (k.kind == KeyKind::choice) {
      CHECK(std::find(k.choices.begin(), k.choices.end(), k.default_value) != k.choices.end());
    }
    if (k.allows_auto()) CHECK(k.default_value == "auto");
  }
  CHECK(names.size() == config_keys().size());
  // The stored configuration holds every key stored at its default, and no other.
  const Config c = make_config({});
  for (const auto& k : config_keys()) {
    INFO(k.key);
    CHECK(c.values.count(k.key) == (k.stored_at_default ? 1u : 0u));
  }
}

TEST_CASE("key declarations: every range is enforced, with the declared range in the message", "[keys][config]") {
  int checked = 0;
  for (const auto& k : config_keys()) {
    if (k.kind != KeyKind::integer && k.kind != KeyKind::number) continue;
    if (!std::isfinite(k.min) && !std::isfinite(k.max)) continue;
    INFO(k.key);
    if (std::isfinite(k.min)) {
      // Just outside the lower bound: the bound itself when strict, one below (or a tenth) when not.
      const double outside = k.min_strict ? k.min : (k.kind == KeyKind::integer ? k.min - 1 : k.min - 0.1);
      std::ostringstream text;
      text << outside;
      CHECK_THROWS_AS(with(k.key, text.str()), UsageError);
      CHECK_THROWS_WITH(with(k.key, text.str()), Contains("'" + k.key + "'") && Contains(k.allowed().substr(
                                                                                      k.allows_auto() ? 7 : 0)));
      ++checked;
    }
    if (std::isfinite(k.max)) {
      std::ostringstream text;
      text << (k.max_strict ? k.max : k.max + 1);
      CHECK_THROWS_WITH(with(k.key, text.str()), Contains("'" + k.key + "'"));
      ++checked;
    }
  }
  CHECK(checked >= 20);
  // Inside the ranges: the boundary values that are allowed are accepted.
  CHECK(with("run.threads", "0").run.threads == 0);
  CHECK(with("dropout.output", "0").dropout.output == 0.0);
  CHECK(with("norm.eps", "0").norm.eps == 0.0);
  CHECK(with("norm.alpha", "-1.5").norm.alpha == -1.5);  // dyt, derf: any scale (0 maps to the bias)
  CHECK(with("norm.type", "dyt").norm.alpha == 0.5);       // Zhu et al. 2025's initial alpha
  CHECK_THROWS_WITH(with("dropout.attention", "1"), Contains("expected a number >= 0 and < 1"));
  CHECK_THROWS_WITH(with("model.tokens", "0"), Contains("expected an integer >= 1"));
  CHECK_THROWS_WITH(with("model.d_qk", "0"), Contains("expected a number > 0"));
}

TEST_CASE("key declarations: a choice key takes its declared choices and lists them when refused", "[keys][config]") {
  for (const auto& k : config_keys()) {
    if (k.kind != KeyKind::choice) continue;
    INFO(k.key);
    CHECK_THROWS_WITH(read_choice({{k.key, "no_such_choice"}}, k.key), Contains("allowed: " + k.allowed()));
    for (const auto& choice : k.choices) CHECK(read_choice({{k.key, " " + choice + " "}}, k.key) == choice);
  }
  // Choices restricted per key: W_Q and W_K are not value maps, the MLP takes three kinds.
  CHECK_THROWS_WITH(with("weights.q", "wishart"), Contains("value matrices"));
  CHECK_THROWS_WITH(with("weights.mlp", "orthogonal"), Contains("allowed: gaussian | zero | file"));
  CHECK_THROWS_WITH(with("weights.o", "tied_qk"), Contains("allowed: gaussian | orthogonal | identity | zero | fixed | file"));
  CHECK(with("weights.v", "wishart").weights.v.type == WeightType::wishart);
}

TEST_CASE("key declarations: --help-keys text and the markdown table come from the declarations", "[keys][config]") {
  const std::string plain = keys_help_plain(config_keys());
  const std::string table = keys_table_markdown(config_keys());
  for (const auto& k : config_keys()) {
    INFO(k.key);
    CHECK_THAT(plain, Contains("--" + k.key + "  (default: "));
    CHECK_THAT(table, Contains("| `" + k.key + "` |"));
  }
  CHECK_THAT(plain, Contains("--model.tokens  (default: 8)\n      number of tokens N (rows of X)\n      allowed: integer >= 1\n"));
  CHECK_THAT(table, Contains("| `mask.type` | `complete` | complete \\| causal \\| sliding_window \\| "
                             "unidirectional_sliding_window \\| custom |"));
  CHECK_THAT(table, Contains("| `model.d_qk` | `auto` | auto \\| number > 0 (auto = d_k) |"));
  // Every optional measure is listed in output.measures' allowed values.
  for (const auto& name : peer_measure_names()) CHECK_THAT(key_decl("output.measures").allowed(), Contains(name));
}

TEST_CASE("key declarations: auto defaults are resolved from the keys they depend on", "[keys][config]") {
  // d_k = d, d_QK = d_k, stds 1/sqrt(d) (and 1/sqrt(d_v), 1/sqrt(m)), rank rtol max(N, d) eps:
  // each resolved after the key it depends on, and written out in the stored configuration.
  const Config c = make_config({{"model.dim", "32"}, {"model.tokens", "5"}, {"model.value_dim", "8"}, {"mlp.width", "16"}});
  CHECK(c.model.key_dim == 32);
  CHECK(c.model.d_qk == 32.0);
  CHECK(c.values.at("model.key_dim") == "32");
  CHECK(c.values.at("model.d_qk") == "32");
  CHECK(c.weights.q.std == 1.0 / std::sqrt(32.0));
  CHECK(c.weights.o.std == 1.0 / std::sqrt(8.0));
  CHECK(c.weights.mlp_in_std == 1.0 / std::sqrt(32.0));
  CHECK(c.weights.mlp_out_std == 0.25);
  CHECK(c.metrics.rank_rtol == 32 * std::numeric_limits<double>::epsilon());
  CHECK(c.model.beta == 1.0 / std::sqrt(32.0));
  CHECK(make_config({{"model.dim", "6"}, {"model.key_dim", "3"}}).model.d_qk == 3.0);
}

TEST_CASE("cross-key checks carried by the declarations (KeyDecl::check, check_declared_keys)", "[keys][variants]") {
  for (const char* key : {"attention.qk_norm", "attention.qk_scale", "attention.rope", "attention.xpos"})
    CHECK(static_cast<bool>(key_decl(key).check));
  CHECK_THROWS_WITH(make_config({{"attention.qk_norm", "true"}, {"attention.kind", "random_markov"}}),
                    Contains("attention.qk_norm") && Contains("random_markov"));
  CHECK_THROWS_WITH(make_config({{"attention.qk_norm", "true"}, {"model.d_qk", "2"}}),
                    Contains("attention.qk_norm") && Contains("model.d_qk"));
  CHECK_THROWS_WITH(make_config({{"attention.qk_scale", "2"}}),
                    Contains("attention.qk_scale") && Contains("needs attention.qk_norm"));
  CHECK(make_config({{"attention.qk_norm", "true"}, {"attention.qk_scale", "2"}}).attention.qk_scale == 2.0);
  CHECK_THROWS_WITH(make_config({{"attention.rope", "true"}, {"attention.kind", "random_markov"}}),
                    Contains("attention.rope") && Contains("random_markov"));
  // Run per layer range too (each range's whole configuration is read).
  CHECK_THROWS_WITH(make_config({{"model.layers", "4"}, {"model.layer_overrides", "0-1:attention.qk_scale=2"}}),
                    Contains("attention.qk_scale"));
}
