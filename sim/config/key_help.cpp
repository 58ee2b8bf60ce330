// The keys described for people: --help texts, the markdown key table, "did you mean" (config/keys.hpp).
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

std::string unknown_key_message(const std::string& key, const std::string& where) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  auto leaf = [](const std::string& k) { return k.substr(k.find('.') + 1); };
  std::string best;
  std::size_t best_d = 4;
  for (const auto& k : config_keys()) {
    if (key.size() > 64) break;  // no suggestion for a long key (the distance is quadratic)
    const std::size_t d = leaf(k.key) == leaf(key) ? 1 : distance(k.key, key);
    if (d < best_d) best_d = d, best = k.key;
  }
  return "unknown key '" + printable(key) + "'" + (where.empty() ? "" : " " + where) +
         (best.empty() ? "" : " (did you mean '" + best + "'?)") + "; 'rcsim --help-keys' lists every key";
}

namespace {
std::string allowed_with_auto(const KeyDecl& k) {
  return k.allowed() + (k.allows_auto() ? " (auto = " + k.auto_means + ")" : "");
}
}  // namespace

std::string keys_help_plain(const std::vector<KeyDecl>& keys) {
  std::ostringstream os;
  for (const auto& k : keys) {
    os << "  --" << k.key << "  (default: " << (k.default_value.empty() ? "\"\"" : k.default_value) << ")\n";
    os << "      " << k.help << "\n";
    if (k.kind != KeyKind::text || !k.allowed_text.empty())
      os << "      allowed: " << allowed_with_auto(k) << "\n";
  }
  return os.str();
}

std::string keys_table_markdown(const std::vector<KeyDecl>& keys) {
  auto cell = [](const std::string& s) {
    std::string out;
    for (const char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
    return out;
  };
  std::ostringstream os;
  os << "| key | default | allowed | meaning |\n|---|---|---|---|\n";
  for (const auto& k : keys)
    os << "| `" << k.key << "` | `" << (k.default_value.empty() ? "\"\"" : k.default_value) << "` | "
       << cell(k.kind != KeyKind::text || !k.allowed_text.empty() ? allowed_with_auto(k) : "") << " | " << cell(k.help)
       << " |\n";
  return os.str();
}

}  // namespace rcsim
