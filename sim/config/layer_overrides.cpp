#include "config/layer_overrides.hpp"

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "config/keys.hpp"
#include "config/values.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {

// --- Settings per layer range (docs/science/gradients.md) ---
// model.layer_overrides = FROM-TO:key=value[,key=value...]; ... : each range's settings are the
// whole configuration read again with the range's keys replaced, so that each value is parsed and
// validated by its own key's reader (same messages, same allowed values, same cross-key checks).
const char* const kLayerOverrides = "model.layer_overrides";
// The keys allowed per range are those declared per_layer (config/keys.cpp).
std::string per_layer_keys_text() {
  std::string t;
  for (const auto& k : per_layer_keys()) t += (t.empty() ? "" : ", ") + k;
  return t;
}
[[noreturn]] void bad_layer_entry(const std::string& entry, const std::string& why) {
  throw UsageError(std::string("key '") + kLayerOverrides + "': entry '" + printable(entry) + "': " + why);
}
const std::string kEntryForm =
    "expected FROM-TO:key=value (blocks FROM..TO, 0-based and inclusive; TO omitted: to the last block; FROM "
    "alone: one block; several keys of a range separated by ','; entries separated by ';')";

int block_index(const std::string& entry, const std::string& text, int L) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
    bad_layer_entry(entry, "block index '" + printable(text) + "' is not an integer >= 0; " + kEntryForm);
  const int t = std::stoi(text);
  if (t >= L)
    bad_layer_entry(entry, "block " + text + " is beyond the depth: blocks are 0 .. " + std::to_string(L - 1) +
                               " (model.layers = " + std::to_string(L) + ")");
  return t;
}

}  // namespace

void read_layer_overrides(const KeyValues& given, Config& c, Config (*read_keys)(KeyValues&)) {
  const std::string text = trim(given.at(kLayerOverrides));
  if (text == "none") return;
  const int L = c.model.layers;
  std::vector<std::string> entries;
  for (std::size_t b = 0;;) {
    const auto e = text.find(';', b);
    entries.push_back(trim(text.substr(b, e == std::string::npos ? std::string::npos : e - b)));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  for (const std::string& entry : entries) {
    if (entry.empty()) continue;  // a trailing ';'
    const auto colon = entry.find(':');
    if (colon == std::string::npos) bad_layer_entry(entry, "no ':' after the range; " + kEntryForm);
    const std::string range = trim(entry.substr(0, colon));
    const auto dash = range.find('-');
    const int from = block_index(entry, trim(range.substr(0, dash)), L);
    const int to = dash == std::string::npos                ? from
                   : trim(range.substr(dash + 1)).empty() ? L - 1
                                                           : block_index(entry, trim(range.substr(dash + 1)), L);
    if (to < from) bad_layer_entry(entry, "empty range " + range + " (FROM must be <= TO)");
    for (const auto& o : c.layer_overrides)
      if (from <= o.to && o.from <= to)
        bad_layer_entry(entry, "range " + range + " overlaps the range " + std::to_string(o.from) + "-" +
                                   std::to_string(o.to) + " of an earlier entry (ranges must be disjoint)");
    KeyValues alt = given;
    alt[kLayerOverrides] = "none";
    std::set<std::string> seen;
    const std::vector<std::string> assignments = split_list(entry.substr(colon + 1));
    if (assignments.empty()) bad_layer_entry(entry, "no key=value after ':'; " + kEntryForm);
    for (const std::string& a : assignments) {
      const auto eq = a.find('=');
      if (eq == std::string::npos) bad_layer_entry(entry, "'" + printable(a) + "' is not key=value; " + kEntryForm);
      const std::string key = trim(a.substr(0, eq)), value = trim(a.substr(eq + 1));
      if (!is_known_key(key))
        bad_layer_entry(entry, unknown_key_message(key, "") + "; keys allowed per layer: " + per_layer_keys_text());
      if (!key_decl(key).per_layer)
        bad_layer_entry(entry, "key '" + key + "' is not a setting that may differ by layer; keys allowed per layer: " +
                                   per_layer_keys_text());
      if (!seen.insert(key).second) bad_layer_entry(entry, "key '" + key + "' given twice");
      if (value.empty()) bad_layer_entry(entry, "key '" + key + "' has no value");
      alt[key] = value;
    }
    Config r;
    try {
      r = read_keys(alt);
    } catch (const UsageError& e) {
      bad_layer_entry(entry, e.what());
    }
    LayerOverride o;
    o.from = from, o.to = to;
    // Settings that the whole stack shares (the weights read, the noise, the time axis).
    if (c.norm.params_from_file && (r.norm.position != c.norm.position || r.norm.type != c.norm.type))
      bad_layer_entry(entry, "norm.params = file reads the normalisations of every layer for one norm.position and "
                             "norm.type; they cannot differ by layer");
    if (c.dynamics_noise > 0.0)
      bad_layer_entry(entry, "not with dynamics.noise > 0 (its projection is the global norm.type)");
    if (c.integrator == Integrator::rk4)
      bad_layer_entry(entry, "not with dynamics.integrator = rk4 (dt = residual.alpha for the whole stack)");
    // The weight sampler draws for the base settings: random-Markov logits and a file's logit bias.
    if ((r.attention.kind == AttentionKind::random_markov) != (c.attention.kind == AttentionKind::random_markov))
      bad_layer_entry(entry, "attention.kind = random_markov draws its logits with the weights of every block; it "
                             "cannot differ by layer");
    if ((r.attention.logit_bias.kind == LogitBiasKind::file) != (c.attention.logit_bias.kind == LogitBiasKind::file))
      bad_layer_entry(entry, "attention.logit_bias = file reads the bias of every block from weights.file; it cannot "
                             "differ by layer");
    if ((r.mlp.activation == MlpActivation::swiglu) != (c.mlp.activation == MlpActivation::swiglu))
      bad_layer_entry(entry, "mlp.activation = swiglu draws (or reads) the gate W_gate with the weights of every block; it "
                             "cannot differ by layer");
    if (c.residual_project == ResidualProject::tangent && r.residual_alpha != c.residual_alpha)
      bad_layer_entry(entry, "residual.project = tangent stores /time = residual.alpha x layer; residual.alpha cannot "
                             "differ by layer with it");
    o.spec = std::make_shared<const ModelSpec>(static_cast<const ModelSpec&>(r));
    c.layer_overrides.push_back(o);
  }
}


}  // namespace rcsim
