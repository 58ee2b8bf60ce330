// The measure registry (kernel/measures/measure_registry.hpp): every entry has one compute path and a
// unique name, and the lists derived from it (output.measures's help text and validation, the
// result columns) hold exactly its names.
#include <catch2/catch.hpp>

#include <cctype>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/keys.hpp"
#include "io/inputs.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/measures/measure_registry.hpp"
#include "kernel/measures/metrics.hpp"
#include "kernel/model/random.hpp"
#include "kernel/trial/simulation.hpp"

using namespace rcsim;

namespace {

// The members of `d` that compute it, as a string of flags (core_token, core_report, state,
// of_matrix, update, report_values): exactly the one its pass uses must be set.
std::string compute_members(const MeasureDef& d) {
  return std::string(d.core_token ? "T" : "-") + (d.core_report ? "R" : "-") + (d.state ? "S" : "-") +
         (d.of_matrix ? "M" : "-") + (d.update ? "U" : "-") + (d.report_values ? "V" : "-");
}

std::string expected_members(const MeasureDef& d) {
  switch (d.pass) {
    case MeasurePass::core:
      return d.axis == MeasureAxis::token ? "T-----" : "-R----";
    case MeasurePass::state:
      return "--S---";
    case MeasurePass::attention:
    case MeasurePass::attention_product:
      return "---M--";
    case MeasurePass::update:
      return "----U-";
    case MeasurePass::gradients:
      return "------";
    case MeasurePass::attention_rows:  // one value (the report) or one per token
      return d.shape == MeasureShape::per_token ? "-----V" : "-R----";
  }
  return "?";
}

// The leading identifier of each " | "-separated item after the first ": " of a help text.
std::vector<std::string> listed_names(const std::string& help) {
  std::vector<std::string> names;
  std::size_t pos = help.find(": ");
  REQUIRE(pos != std::string::npos);
  pos += 2;
  for (;;) {
    std::size_t end = pos;
    while (end < help.size() && (std::islower(static_cast<unsigned char>(help[end])) ||
                                 std::isdigit(static_cast<unsigned char>(help[end])) || help[end] == '_'))
      ++end;
    names.push_back(help.substr(pos, end - pos));
    const std::size_t next = help.find(" | ", end);
    if (next == std::string::npos) break;
    pos = next + 3;
  }
  return names;
}

}  // namespace

TEST_CASE("measure registry: unique names, one compute path per entry", "[registry][metrics]") {
  std::set<std::string> names;
  bool optional_seen = false;
  for (const MeasureDef& d : measure_registry()) {
    INFO(d.info.name);
    CHECK(names.insert(d.info.name).second);  // no name twice
    CHECK(!d.info.long_name.empty());
    CHECK(d.info.long_name.size() <= 40);  // an axis label (issue 39); the sentence is the description
    CHECK(d.info.description.size() > d.info.long_name.size() / 2);
    CHECK(std::string(d.info.units).size() > 0);
    CHECK(compute_members(d) == expected_members(d));
    if (d.pass == MeasurePass::state) CHECK(d.axis == MeasureAxis::token);
    if (d.pass == MeasurePass::attention || d.pass == MeasurePass::attention_product || d.pass == MeasurePass::update)
      CHECK(d.axis == MeasureAxis::attention);
    // A gradient measure is filled by a block-gradient function (attention axis) or by a declared
    // pass of the derivative measures (token axis), never by its name.
    if (d.pass == MeasurePass::gradients)
      CHECK((d.axis == MeasureAxis::attention ? d.block_gradient != nullptr && d.derivative == DerivativePass::none
                                              : d.block_gradient == nullptr && d.derivative != DerivativePass::none));
    else
      CHECK(d.derivative == DerivativePass::none);
    if (d.optional()) optional_seen = true;
    CHECK(d.optional() == optional_seen);  // the core measures come first
    CHECK(find_measure(d.info.name) == &d);
  }
  CHECK(find_measure("no_such_measure") == nullptr);
  CHECK(peer_measure_names() == optional_measure_names());
}

TEST_CASE("measure registry: the core token entries read TokenMeasures in its order", "[registry][metrics]") {
  RandomStream rng(7, 0);
  Matrix X(6, 4);
  for (Eigen::Index i = 0; i < X.size(); ++i) X.data()[i] = rng.normal();
  Vector sigma;
  const TokenMeasures m = measure_tokens(X, MeasureOptions{1e-12, 0.0, 4}, sigma);
  const auto values = token_measure_values(m);
  std::size_t i = 0;
  for (const MeasureDef& d : measure_registry())
    if (d.pass == MeasurePass::core && d.axis == MeasureAxis::token) {
      INFO(d.info.name);
      REQUIRE(i < values.size());
      CHECK(m.*d.core_token == values[i++]);
    }
  CHECK(i == values.size());
  CHECK(token_measure_info().size() == values.size());
}

// A registry entry whose compute path is missing (a gradient entry the reverse pass does not
// fill, a function never called) leaves its column NaN: every measure of a tiny run with every
// optional measure must be finite.
TEST_CASE("measure registry: a run with every optional measure fills every column", "[registry][metrics]") {
  std::string all;
  for (const auto& name : optional_measure_names()) all += (all.empty() ? "" : ",") + name;
  const Config c = make_config({{"model.tokens", "5"},
                                {"model.dim", "2"},
                                {"model.layers", "3"},
                                {"run.trials", "2"},
                                {"output.measures", all}});
  const RunResults r = run_simulation(prepare(c), 1);
  REQUIRE(r.token_defs.size() + r.attention_defs.size() == measure_registry().size());
  REQUIRE(r.token.size() == r.token_defs.size());
  REQUIRE(r.attention.size() == r.attention_defs.size());
  for (std::size_t i = 0; i < r.token.size(); ++i) {
    INFO(r.token_info[i].name);
    CHECK(r.token_defs[i]->axis == MeasureAxis::token);
    CHECK(r.token[i].allFinite());
  }
  for (std::size_t i = 0; i < r.attention.size(); ++i) {
    INFO(r.attention_info[i].name);
    CHECK(r.attention_defs[i]->axis == MeasureAxis::attention);
    CHECK(r.attention[i].allFinite());
  }
}

TEST_CASE("measure registry: output.measures's help and validation list exactly the registry names",
          "[registry][config]") {
  const std::string text = optional_measure_names_text();
  CHECK(listed_names("names: " + text) == optional_measure_names());
  // rcsim --help-keys and the docs table: the allowed values of output.measures (config/keys.cpp).
  const KeyDecl& key = key_decl("output.measures");
  CHECK(listed_names(key.allowed()) == optional_measure_names());
  CHECK(keys_help_plain(config_keys()).find(text) != std::string::npos);
  for (const char* bad : {"no_such_measure", "mu"}) {
    INFO(bad);
    CHECK_THROWS_WITH(make_config({{"output.measures", bad}}), Catch::Matchers::Contains(text));
  }
}

TEST_CASE("measure registry: the gradient measures' description follows metrics.readout", "[registry][metrics]") {
  // Issue 34: under metrics.readout = last_token the files said L = 1^T X(L) R, the all-token loss.
  // The loss is in the description (the sentence); the short long_name follows it where it names it.
  ModelSpec all, last;
  last.metrics.readout = Readout::last_token;
  int gradient_measures = 0;
  for (const MeasureDef& d : measure_registry()) {
    INFO(d.info.name);
    const std::string a = measure_info(d, all).description, b = measure_info(d, last).description;
    const std::string la = measure_info(d, all).long_name, lb = measure_info(d, last).long_name;
    CHECK((la.find("X(L) R") == std::string::npos) == (la == lb));
    CHECK(lb.find("d(X(L) R)") == std::string::npos);
    if (d.pass != MeasurePass::gradients || a.find("X(L) R") == std::string::npos) {
      CHECK(a == b);  // nothing else depends on the readout
      continue;
    }
    ++gradient_measures;
    CHECK(a == d.info.description);
    CHECK(b.find("1^T X(L) R") == std::string::npos);
    CHECK(b.find("d(X(L) R)") == std::string::npos);
    CHECK(b.find("x_N(L) R") != std::string::npos);
  }
  CHECK(gradient_measures == 9);  // grad_x_norm, the six weight gradients, jacobian_log_fro2 and _spec2
}
