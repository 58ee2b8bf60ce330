// The values of declared keys, read and checked against their declaration (config/keys.hpp).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "config/keys.hpp"
#include "config/values.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {
const std::string& text_of(const KeyValues& v, const KeyDecl& k) {
  const auto it = v.find(k.key);
  return it == v.end() ? k.default_value : it->second;
}
}  // namespace

bool is_auto(const KeyValues& v, const std::string& key) {
  const KeyDecl& k = key_decl(key);
  return k.allows_auto() && trim(text_of(v, k)) == "auto";
}

int read_int(const KeyValues& v, const std::string& key) {
  const KeyDecl& k = key_decl(key);
  if (k.kind != KeyKind::integer) throw std::logic_error(key + " is not an integer key");
  const std::string& text = text_of(v, k);
  const int x = parse_int_value(key, text, static_cast<int>(k.min));
  if (x > k.max) bad_value(key, text, "expected an integer" + range_text(k));
  return x;
}

double read_number(const KeyValues& v, const std::string& key) {
  const KeyDecl& k = key_decl(key);
  if (k.kind != KeyKind::number && k.kind != KeyKind::text) throw std::logic_error(key + " is not a number key");
  const std::string& text = text_of(v, k);
  const double x = parse_double(key, text);
  const bool below = k.min_strict ? !(x > k.min) : !(x >= k.min);
  const bool above = k.max_strict ? !(x < k.max) : !(x <= k.max);
  if (below || above) bad_value(key, text, "expected a number" + range_text(k));
  return x;
}

bool read_bool(const KeyValues& v, const std::string& key) {
  const KeyDecl& k = key_decl(key);
  if (k.kind != KeyKind::boolean) throw std::logic_error(key + " is not a boolean key");
  return parse_bool_value(key, text_of(v, k));
}

std::string read_choice(const KeyValues& v, const std::string& key) {
  const KeyDecl& k = key_decl(key);
  if (k.kind != KeyKind::choice) throw std::logic_error(key + " is not a choice key");
  const std::string& text = text_of(v, k);
  const std::string t = trim(text);
  if (std::find(k.choices.begin(), k.choices.end(), t) == k.choices.end()) bad_value(key, text, "allowed: " + k.allowed());
  return t;
}

}  // namespace rcsim

namespace rcsim {

void read_declared_keys(const KeyValues& v, ModelSpec& c) {
  for (const KeyDecl& k : config_keys())
    if (k.read) k.read(v, c);
}

void check_declared_keys(const ModelSpec& c) {
  for (const KeyDecl& k : config_keys())
    if (k.check) k.check(c);
}

std::vector<std::string> per_layer_keys() {
  std::vector<std::string> keys;
  for (const KeyDecl& k : config_keys())
    if (k.per_layer) keys.push_back(k.key);
  return keys;
}

}  // namespace rcsim
