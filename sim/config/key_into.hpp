// How a key is read into the spec, attached to its declaration (config/keys.cpp): the key table
// says which ModelSpec member a key sets, so config.cpp's readers need no line per key
// (read_declared_keys applies these before their cross-key checks), and per_layer marks the block
// settings that model.layer_overrides may give per layer range.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "config/keys.hpp"
#include "config/names.hpp"
#include "kernel/model/model_spec.hpp"

namespace rcsim {

// The member of ModelSpec at `path`, as the accessor that `into` takes.
#define RCSIM_SPEC_MEMBER(path) [](ModelSpec& spec_) -> auto& { return spec_.path; }

// k read into the member that `member` returns (bool, int or double: read_bool, read_int, read_number).
template <class Member>
KeyDecl into(KeyDecl k, Member member) {
  k.read = [member, key = k.key](const KeyValues& v, ModelSpec& c) {
    auto& m = member(c);
    using T = std::decay_t<decltype(m)>;
    if constexpr (std::is_same_v<T, bool>) {
      m = read_bool(v, key);
    } else if constexpr (std::is_same_v<T, int>) {
      m = read_int(v, key);
    } else {
      static_assert(std::is_same_v<T, double>, "into: a bool, int or double member, or an enum with its names");
      m = read_number(v, key);
    }
  };
  return k;
}

// A choice key read into an enum member through its name table (config/names.hpp).
template <class Member, class Enum>
KeyDecl into(KeyDecl k, Member member, const NameTable<Enum>& (*names)()) {
  k.read = [member, names, key = k.key](const KeyValues& v, ModelSpec& c) {
    const std::string name = read_choice(v, key);
    for (const auto& [n, value] : names())
      if (n == name) {
        member(c) = value;
        return;
      }
    throw std::logic_error("choice " + name + " of " + key + " has no enum value");
  };
  return k;
}

// k with its cross-key check: `check` throws UsageError naming k.key where the configuration's
// other keys do not allow the setting (run after every key is read: check_declared_keys).
template <class Check>
KeyDecl checked(KeyDecl k, Check check) {
  k.check = std::move(check);
  return k;
}

// A block setting that may differ by layer range (model.layer_overrides).
inline KeyDecl per_layer(KeyDecl k) {
  k.per_layer = true;
  return k;
}

}  // namespace rcsim
