// The declaration of every configuration key, in one place: its dotted name, default, kind of
// value, allowed range or values, meaning, and whether the stored configuration (/config)
// always holds it. Parsing (config/config.cpp), validation messages, `rcsim --help-keys`, the
// stored INI text and the key table of docs/reference/configuration.md
// (`rcsim --help-keys=markdown`, checked by ctest docs_key_table) all come from here.
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace rcsim {

struct ModelSpec;
using KeyValues = std::map<std::string, std::string>;

enum class KeyKind {
  text,     // free text; `allowed` says what (validated where it is used)
  file,     // a file name
  integer,  // an integer in [min, max]
  number,   // a finite number (or a fraction a/b) in the range
  boolean,  // true | false (also 1/0, yes/no, on/off)
  choice,   // one of `choices`
  seed,     // an unsigned 64-bit integer
  numbers,  // one number or d numbers
  matrix,   // an inline matrix, rows separated by ';'
};

struct KeyDecl {
  KeyDecl(std::string key_, std::string default_, std::string help_)
      : key(std::move(key_)), default_value(std::move(default_)), help(std::move(help_)) {}
  std::string key;            // dotted: section.name
  std::string default_value;  // text, as the stored configuration writes it
  std::string help;           // meaning (what is allowed is generated from the fields below)
  KeyKind kind = KeyKind::text;
  std::string allowed_text;   // kind text: what is allowed, in words
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_strict = false, max_strict = false;
  std::string auto_means;     // non-empty: "auto" is allowed and means this
  std::vector<std::string> choices;
  bool stored_at_default = true;  // false: /config holds the key only when it differs from the default
  bool flag = false;              // a command's switch: given alone (--name) it means true
  // The commands of the run vocabulary that use the key (config/keys.cpp, commands_using): run
  // and sweep use every key; equilibria (one attention layer with fixed weights, iterated: no block
  // structure, MLP, dropout, noise, per-layer settings, measures or recorded layers) and mask-info
  // a part. A key a command does not use is refused on its command line, naming the commands that
  // use it, and dropped with a warning from a configuration file shared with `rcsim run` (never
  // silently ignored and recorded in /config; sim/cli/command_table.cpp).
  std::vector<std::string> commands;
  bool used_by(const std::string& command) const;
  // How the key is read into the spec, where its declaration says (config/keys.cpp, `into`): the
  // validated value set into one ModelSpec member. read_declared_keys applies every such reader
  // before the cross-key checks of config.cpp's readers, so a key read this way needs no line there.
  std::function<void(const KeyValues&, ModelSpec&)> read;
  // A block setting that model.layer_overrides may give per layer range (each range's BlockParams
  // is built from the range's whole configuration: kernel/block/block.hpp, layer_settings).
  bool per_layer = false;
  // The cross-key checks of the setting the key declares (config/key_into.hpp, `checked`): run on
  // the whole configuration after every key is read (check_declared_keys), each throwing UsageError
  // that names the key, so a variant's checks live in its declaration, not in config.cpp's readers.
  std::function<void(const ModelSpec&)> check;

  bool allows_auto() const { return !auto_means.empty(); }
  // What the value may be, in words: "integer >= 1", "auto | number > 0", "complete | causal | ...".
  std::string allowed() const;
};

// Every key of run, sweep, mask-info and equilibria, in the order of --help.
const std::vector<KeyDecl>& config_keys();
bool is_known_key(const std::string& key);
// sweep.mode (a [sweep] section's key, not a model key): product | zip.
const KeyDecl& sweep_mode_key();
// The declaration of a known key (throws std::logic_error for an unknown one: a programming error).
const KeyDecl& key_decl(const std::string& key);

// "unknown key ..." with the nearest known key when one is close (edit distance <= 3, or the
// same name in another section): "did you mean 'model.dim'?".
std::string unknown_key_message(const std::string& key, const std::string& where);

// Typed readers of a key's text in a key -> value map, validated against its declaration; each
// throws UsageError naming the key and what is allowed.
bool is_auto(const KeyValues& v, const std::string& key);
// " >= 1", " > 0 and <= 1", ...: the range of a numeric key's values, as its messages print it.
std::string range_text(const KeyDecl& k);
int read_int(const KeyValues& v, const std::string& key);
double read_number(const KeyValues& v, const std::string& key);
bool read_bool(const KeyValues& v, const std::string& key);
// The value of a choice key (one of its declared choices).
std::string read_choice(const KeyValues& v, const std::string& key);

// Every key whose declaration carries its reader (KeyDecl::read), read from v into c.
void read_declared_keys(const KeyValues& v, ModelSpec& c);
// Every declared cross-key check (KeyDecl::check) on c, in --help order.
void check_declared_keys(const ModelSpec& c);
// The keys that model.layer_overrides allows (KeyDecl::per_layer), in --help order.
std::vector<std::string> per_layer_keys();

// The keys as text: `--help-keys` (plain) and the reference table (markdown).
std::string keys_help_plain(const std::vector<KeyDecl>& keys);
std::string keys_table_markdown(const std::vector<KeyDecl>& keys);

}  // namespace rcsim
