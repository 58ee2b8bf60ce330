// Configuration vocabulary: defaults, derived defaults, precedence, and every usage error.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "config/config.hpp"
#include "kernel/support/errors.hpp"

using namespace rcsim;
using Catch::Matchers::Contains;

namespace {
std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}
}  // namespace

TEST_CASE("defaults and derived defaults are resolved", "[config]") {
  const Config c = make_config({{"model.dim", "9"}, {"model.tokens", "5"}});
  CHECK(c.model.key_dim == 9);
  CHECK(c.model.d_qk == 9.0);
  CHECK(c.weights.q.std == Approx(1.0 / 3.0));
  CHECK(c.metrics.rank_rtol == 9 * std::numeric_limits<double>::epsilon());
  CHECK(c.values.at("model.key_dim") == "9");
  SECTION("d_qk follows key_dim unless given") {
    CHECK(make_config({{"model.key_dim", "4"}}).model.d_qk == 4.0);
    CHECK(make_config({{"model.d_qk", "0.015625"}}).model.d_qk == 1.0 / 64.0);
  }
}

TEST_CASE("the resolved INI text reads back to the same configuration", "[config]") {
  const Config c = make_config({{"mask.type", "sliding_window"}, {"mask.window", "3"}, {"norm.type", "layernorm"},
                                {"norm.gain", "1 2 3 4"}, {"weights.v", "fixed"},
                                {"weights.v_matrix", "1 0 0 0; 0 1 0 0; 0 0 1 0; 0 0 0 0.5"},
                                {"model.d_qk", "0.1"}});
  const std::string path = write_temp("rcsim_test_roundtrip.ini", c.to_ini());
  const ParsedArgs p = parse_config_sources({}, path);
  const Config back = make_config(p.values);
  CHECK(back.to_ini() == c.to_ini());
  CHECK(back.model.d_qk == 0.1);
  CHECK(back.weights.v.matrix(3, 3) == 0.5);
  CHECK(back.norm.gain == std::vector<double>{1, 2, 3, 4});
}

TEST_CASE("model.beta_log_power: beta = model.beta (ln N)^p, the base value stored", "[config]") {
  // N = 20, p = 1.5, model.beta = 0.25: beta = 0.25 ln(20)^1.5 = 0.25 x 5.5913... (ln 20 = 2.995732...).
  const Config c = make_config({{"model.tokens", "20"}, {"model.beta", "0.25"}, {"model.beta_log_power", "1.5"}});
  const double scale = 2.995732273553991 * std::sqrt(2.995732273553991);
  CHECK(c.model.beta == Approx(0.25 * scale).epsilon(1e-14));
  CHECK(c.model.d_qk == Approx(16.0 / (scale * scale)).epsilon(1e-14));  // beta = 1/sqrt(d_QK) still
  CHECK(c.values.at("model.beta") == "0.25");                           // the base value, not the scaled one
  SECTION("the resolved text reads back to the same scaled beta (scaled once)") {
    const Config back = make_config(parse_config_sources({}, write_temp("rcsim_test_logbeta.ini", c.to_ini())).values);
    CHECK(back.model.beta == c.model.beta);
    CHECK(back.model.d_qk == c.model.d_qk);
  }
  SECTION("with model.beta auto: (ln N)^p / sqrt(d_k); p = 0 leaves beta as given") {
    CHECK(make_config({{"model.tokens", "20"}, {"model.dim", "16"}, {"model.beta_log_power", "1.5"}}).model.beta ==
          Approx(scale / 4.0).epsilon(1e-14));
    CHECK(make_config({{"model.tokens", "20"}, {"model.beta", "0.25"}, {"model.beta_log_power", "0"}}).model.beta ==
          0.25);
  }
  SECTION("N = 1 has ln N = 0: refused") {
    CHECK_THROWS_WITH(make_config({{"model.tokens", "1"}, {"model.beta_log_power", "1"}}),
                      Contains("model.beta_log_power") && Contains("model.tokens >= 2"));
  }
}

TEST_CASE("model.beta_log_power and attention.diff_lambda refused beyond the precision's range (issue 47)",
          "[config]") {
  // N = 8, model.beta = 1: beta = (ln 8)^p. float64's limit is 1/sqrt(DBL_MIN) = 2^511 = 6.7039e153 (d_qk = 1/beta^2
  // a positive normal double): p <= 511 ln 2 / ln ln 8 = 354.198 / 0.732099 = 483.81; float32's FLT_MAX / 2 = 2^127
  // (beta, sqrt(2) beta in differential attention, as a float): p <= 127 ln 2 / ln ln 8 = 120.24.
  const auto at = [](const std::string& p, const std::string& precision) {
    return make_config(
        {{"model.tokens", "8"}, {"model.beta", "1"}, {"model.beta_log_power", p}, {"run.precision", precision}});
  };
  CHECK(at("483", "float64").model.beta == Approx(std::pow(std::log(8.0), 483.0)).epsilon(1e-12));
  CHECK_THROWS_WITH(at("484", "float64"), Contains("key 'model.beta_log_power' = 484") &&
                                              Contains("6.7039e+153] of float64") &&
                                              Contains("p in [-483.812, 483.812]"));
  CHECK_THROWS_WITH(at("-484", "float64"),
                    Contains("the logit scale beta = 1.29954e-154") && Contains("[1.49167e-154,"));
  CHECK(at("120", "float32").model.beta == Approx(std::pow(std::log(8.0), 120.0)).epsilon(1e-12));
  CHECK_THROWS_WITH(at("121", "float32"), Contains("1.70141e+38] of float32") && Contains("p in [-120.243, 120.243]"));
  SECTION("no log power: a given model.d_qk whose beta leaves float32 is named") {
    CHECK_THROWS_WITH(make_config({{"model.d_qk", "1e-80"}, {"run.precision", "float32"}}),
                      Contains("key 'model.d_qk' = ") && Contains("the logit scale beta = 1e+40"));
  }
  // |lambda| <= sqrt of the largest number: sqrt(DBL_MAX) = 1.34078e154, sqrt(FLT_MAX) = 1.84467e19.
  const auto lambda = [](const std::string& value, const std::string& precision) {
    return make_config({{"model.dim", "8"},
                        {"attention.differential", "true"},
                        {"attention.diff_lambda", value},
                        {"run.precision", precision}});
  };
  CHECK(lambda("-1.34e154", "float64").attention.diff_lambda == -1.34e154);
  CHECK_THROWS_WITH(lambda("1.35e154", "float64"),
                    Contains("key 'attention.diff_lambda' = 1.35e154") && Contains("limit 1.34078e+154 of float64"));
  CHECK(lambda("1.8e19", "float32").attention.diff_lambda == 1.8e19);
  CHECK_THROWS_WITH(lambda("-1.9e19", "float32"), Contains("give |lambda| <= 1.84467e+19"));
  SECTION("a layer's own lambda (model.layer_overrides) is checked as the stack's") {
    CHECK_THROWS_WITH(make_config({{"model.dim", "8"},
                                   {"model.layers", "3"},
                                   {"attention.differential", "true"},
                                   {"model.layer_overrides", "1-1:attention.diff_lambda=1e200"}}),
                      Contains("attention.diff_lambda") && Contains("1.34078e+154"));
  }
}

TEST_CASE("command line wins over the file, file over defaults", "[config]") {
  const std::string path = write_temp("rcsim_test_prec.ini", "[model]\ntokens = 7\nlayers = 3\n[mask]\ntype = causal\n");
  const ParsedArgs p = parse_config_sources({"--model.tokens=11"}, path);
  const Config c = make_config(p.values);
  CHECK(c.model.tokens == 11);  // command line
  CHECK(c.model.layers == 3);   // file
  CHECK(c.mask.type == MaskType::causal);
  CHECK(c.model.dim == 4);      // default
}

TEST_CASE("sweep sections are collected as axes", "[config][sweep]") {
  const std::string path =
      write_temp("rcsim_test_sweep.ini", "[sweep]\nmask.type = complete, causal\nmodel.d_qk = 0.015625, 1, 64\n");
  const ParsedArgs p = parse_config_sources({}, path);
  REQUIRE(p.sweep.size() == 2);
  CHECK(p.sweep[0].first == "mask.type");
  CHECK(p.sweep[1].second == std::vector<std::string>{"0.015625", "1", "64"});
}

TEST_CASE("inline matrices", "[config]") {
  const Matrix m = parse_inline_matrix("weights.v_matrix", "0.5 1; 0 1");
  REQUIRE(m.rows() == 2);
  REQUIRE(m.cols() == 2);
  CHECK(m(0, 0) == 0.5);
  CHECK(m(0, 1) == 1.0);
  CHECK(m(1, 0) == 0.0);
  CHECK_THROWS_WITH(parse_inline_matrix("weights.v_matrix", "1 2; 3"), Contains("row 1"));
  CHECK_THROWS_WITH(parse_inline_matrix("init.matrix", "1 x; 3 4"), Contains("'x' is not a finite number"));
}

TEST_CASE("bad values stop with a message naming the key", "[config]") {
  using Case = std::pair<std::map<std::string, std::string>, std::string>;
  const std::vector<Case> cases = {
      {{{"model.tokenz", "3"}}, "unknown key 'model.tokenz'"},
      {{{"model.tokens", "3.5"}}, "model.tokens"},
      {{{"model.tokens", "0"}}, "model.tokens"},
      {{{"model.dim", "0"}}, "model.dim"},
      {{{"model.layers", "-1"}}, "model.layers"},
      {{{"model.heads", "0"}}, "model.heads"},
      {{{"run.trials", "0"}}, "run.trials"},
      {{{"mask.window", "0"}}, "mask.window"},
      {{{"model.d_qk", "0"}}, "model.d_qk"},
      {{{"model.d_qk", "-1"}}, "model.d_qk"},
      {{{"norm.eps", "-1e-5"}}, "norm.eps"},
      {{{"weights.q_std", "-0.1"}}, "weights.q_std"},
      {{{"mask.type", "diagonal"}}, "allowed: complete | causal"},
      {{{"norm.type", "batchnorm"}}, "norm.type"},
      {{{"weights.v", "random"}}, "weights.v"},
      {{{"init.type", "cube"}}, "init.type"},
      {{{"weights.v", "fixed"}, {"weights.v_matrix", "1 0; 0 1"}}, "expected [4, 4]"},
      {{{"weights.v", "fixed"}}, "weights.v_matrix"},
      {{{"init.type", "fixed"}, {"init.matrix", "1 2 3 4; 5 6 7 oops"}}, "init.matrix"},
      {{{"mask.type", "custom"}}, "mask.file"},
      {{{"norm.gain", "1 2"}}, "norm.gain"},
      {{{"run.seed", "-5"}}, "run.seed"},
      {{{"output.tokens", "3,99"}}, "output.tokens"},
      {{{"weights.shared", "maybe"}}, "weights.shared"},
      {{{"model.tokens", "1e999"}}, "model.tokens"},
      {{{"model.d_qk", "1/0"}}, "nonzero denominator"},
      {{{"model.d_qk", "1/2/3"}}, "fraction a/b"},
      {{{"model.d_qk", "1/x"}}, "fraction a/b"},
      {{{"model.d_qk", "/64"}}, "fraction a/b"},
  };
  for (const auto& [values, needle] : cases) {
    INFO("values: " << values.begin()->first << " = " << values.begin()->second);
    CHECK_THROWS_AS(make_config(values), UsageError);
    CHECK_THROWS_WITH(make_config(values), Contains(needle));
  }
}

TEST_CASE("unknown keys in a file or on the command line are named", "[config]") {
  const std::string path = write_temp("rcsim_test_unknown.ini", "[model]\ntokenz = 3\n");
  CHECK_THROWS_WITH(parse_config_sources({}, path), Contains("model.tokenz"));
  CHECK_THROWS_WITH(parse_config_sources({"--mask.typo=1"}, std::nullopt), Contains("mask.typo"));
  CHECK_THROWS_WITH(parse_config_sources({}, std::string("/nonexistent/rcsim.ini")), Contains("/nonexistent/rcsim.ini"));
}

TEST_CASE("a number may be given as a fraction a/b (d_QK = 1/64 as in the paper)", "[config]") {
  CHECK(make_config({{"model.d_qk", "1/64"}}).model.d_qk == 0.015625);  // exact in binary
  CHECK(make_config({{"model.d_qk", " 3 / 4 "}}).model.d_qk == 0.75);
  CHECK(make_config({{"norm.eps", "1e-5/10"}}).norm.eps == 1e-5 / 10);
}

TEST_CASE("an unknown key is answered with the nearest known one", "[config]") {
  CHECK_THROWS_WITH(parse_config_sources({"--model.dims=3"}, std::nullopt), Contains("did you mean 'model.dim'?"));
  CHECK_THROWS_WITH(parse_config_sources({"--mask.tpye=causal"}, std::nullopt), Contains("did you mean 'mask.type'?"));
  // the same name in the wrong section
  CHECK_THROWS_WITH(parse_config_sources({"--model.window=2"}, std::nullopt), Contains("did you mean 'mask.window'?"));
  // nothing close: no suggestion
  CHECK_THROWS_WITH(parse_config_sources({"--frobnicate.widget=1"}, std::nullopt), !Contains("did you mean"));
  const std::string path = write_temp("rcsim_test_unknown2.ini", "[model]\ntokes = 3\n");
  CHECK_THROWS_WITH(parse_config_sources({}, path), Contains("did you mean 'model.tokens'?"));
}

TEST_CASE("INI comment lines start with '#' or a semicolon", "[config]") {
  const std::string path = write_temp("rcsim_test_comments.ini",
                                      "; semicolon comment\n[model]\n  ; indented\ntokens = 8\n# hash\nlayers = 3\n"
                                      "[weights]\nv = fixed\nv_matrix = 1 0; 0 1\n[model]\ndim = 2\n");
  const ParsedArgs p = parse_config_sources({}, path);
  CHECK(p.values.at("model.tokens") == "8");
  CHECK(p.values.at("model.layers") == "3");
  CHECK(p.values.at("weights.v_matrix") == "1 0; 0 1");  // ';' inside a value is a row separator
}

TEST_CASE("a value with '#' or a line break is refused, since the stored INI text would cut it", "[config]") {
  // "file = a#b.h5" in the stored configuration reads back as "a" (a rerun from the file would
  // write elsewhere); a line break would add keys or sections.
  for (const std::string bad : {"runs/a#b.h5", "x.h5\n[sweep]\nrun.seed = 1, 2", "x\r.h5"}) {
    CHECK_THROWS_AS(make_config({{"output.file", bad}}), UsageError);
    CHECK_THROWS_WITH(make_config({{"output.file", bad}}), Contains("key 'output.file'") && Contains("cannot contain '#' or a line break"));
  }
  CHECK(make_config({{"output.file", "runs/a b;c.h5"}}).output.file == "runs/a b;c.h5");  // other characters are kept
}

TEST_CASE("token snapshot lists", "[config]") {
  CHECK(make_config({{"model.layers", "4"}, {"output.tokens", "final"}}).output.token_layers == std::vector<int>{4});
  CHECK(make_config({{"model.layers", "2"}, {"output.tokens", "all"}}).output.token_layers == std::vector<int>{0, 1, 2});
  CHECK(make_config({{"model.layers", "9"}, {"output.tokens", "3, 0,9"}}).output.token_layers == std::vector<int>{0, 3, 9});
}

TEST_CASE("largest rank the layer allows", "[config]") {
  CHECK(max_rank_after_layer(make_config({{"model.tokens", "8"}, {"model.dim", "4"}})) == 4);
  CHECK(max_rank_after_layer(make_config({{"model.tokens", "8"}, {"model.dim", "4"}, {"norm.type", "layernorm"}})) == 3);
  CHECK(max_rank_after_layer(make_config({{"model.tokens", "2"}, {"model.dim", "4"}, {"norm.type", "projection"}})) == 2);
  CHECK(max_rank_after_layer(
            make_config({{"model.tokens", "8"}, {"model.dim", "4"}, {"norm.type", "layernorm"}, {"norm.bias", "0.5"}})) == 4);
}
