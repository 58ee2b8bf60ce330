// The builders of the key table (config/keys.cpp): one call per key, by kind (text, file, integer,
// number with its range, boolean, choice), the defaults printed from the kernel's ModelSpec, and
// the mark for keys added after the golden set. Internal to the configuration layer.
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "config/keys.hpp"
#include "config/names.hpp"
#include "kernel/model/model_spec.hpp"

namespace rcsim::key_builders {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Builders: one line per key in the table below.
inline KeyDecl text(std::string key, std::string def, std::string allowed, std::string help) {
  KeyDecl k{std::move(key), std::move(def), std::move(help)};
  k.allowed_text = std::move(allowed);
  return k;
}
inline KeyDecl file(std::string key, std::string def, std::string help) {
  KeyDecl k{std::move(key), std::move(def), std::move(help)};
  k.kind = KeyKind::file;
  return k;
}
inline KeyDecl integer(std::string key, std::string def, double min, std::string help, std::string auto_means = "") {
  KeyDecl k{std::move(key), std::move(def), std::move(help)};
  k.kind = KeyKind::integer;
  k.min = min;
  k.auto_means = std::move(auto_means);
  return k;
}
struct Range {
  double min = -kInf;
  bool min_strict = false;
  double max = kInf;
  bool max_strict = false;
};
inline const Range kAny{};
inline const Range kNonNegative{0.0, false};
inline const Range kPositive{0.0, true};
inline const Range kProbability{0.0, false, 1.0, true};
inline KeyDecl number(std::string key, std::string def, Range r, std::string help, std::string auto_means = "") {
  KeyDecl k{std::move(key), std::move(def), std::move(help)};
  k.kind = KeyKind::number;
  k.min = r.min, k.min_strict = r.min_strict, k.max = r.max, k.max_strict = r.max_strict;
  k.auto_means = std::move(auto_means);
  return k;
}
inline KeyDecl boolean(std::string key, std::string def, std::string help) {
  KeyDecl k{std::move(key), std::move(def), std::move(help)};
  k.kind = KeyKind::boolean;
  return k;
}
inline KeyDecl choice(std::string key, std::string def, std::vector<std::string> choices, std::string help) {
  KeyDecl k{std::move(key), std::move(def), std::move(help)};
  k.kind = KeyKind::choice;
  k.choices = std::move(choices);
  return k;
}
inline KeyDecl of_kind(KeyKind kind, std::string key, std::string def, std::string help) {
  KeyDecl k{std::move(key), std::move(def), std::move(help)};
  k.kind = kind;
  return k;
}
// The defaults of the keys that the kernel's ModelSpec holds are its member initialisers
// (kernel/model/model_spec.hpp), printed as the key's text: each default is written once (issue 20).
// The printed text is the stored /config text of a run, so it must not change: the key table's
// test (tests/docs/key_table.py) compares every default with the documented table.
inline const ModelSpec& kernel_default() {
  static const ModelSpec spec{};
  return spec;
}
inline std::string text_of(int v) { return std::to_string(v); }
inline std::string text_of(std::uint64_t v) { return std::to_string(v); }
inline std::string text_of(bool v) { return v ? "true" : "false"; }
// The shortest text that reads back as v, with the exponent's leading zeros dropped (1e-5, 0.999).
inline std::string text_of(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string t(buf, res.ptr);
  const auto e = t.find('e');
  if (e != std::string::npos) {
    std::size_t digits = e + 1;
    if (digits < t.size() && (t[digits] == '-' || t[digits] == '+')) ++digits;
    while (digits + 1 < t.size() && t[digits] == '0') t.erase(digits, 1);
    if (t[e + 1] == '+') t.erase(e + 1, 1);
  }
  return t;
}
template <class Enum>
std::string text_of(Enum e, const NameTable<Enum>& table) {
  return enum_name(e, table);
}

// Keys added after the golden set (tests/golden/) was recorded: kept in the stored configuration
// (and the sweep definition) only when not at their default, so that a default run's /config
// text and a default sweep's definition stay as they were.
inline KeyDecl omitted_at_default(KeyDecl k) {
  k.stored_at_default = false;
  return k;
}

}  // namespace rcsim::key_builders
