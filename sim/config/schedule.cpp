// output.schedule: the recorded layers (config/config.hpp: parse_schedule, schedule_size_bound).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/values.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

double schedule_size_bound(const std::string& text, int layers) {
  const std::string t = trim(text);
  const double all = static_cast<double>(layers) + 1.0;
  const auto colon = t.find(':');
  const std::string kind = trim(t.substr(0, colon));
  const std::string arg = colon == std::string::npos ? std::string() : trim(t.substr(colon + 1));
  char* end = nullptr;
  const double k = std::strtod(arg.c_str(), &end);
  if (t == "all") return all;
  if (kind == "every" && k >= 1) return std::min(all, std::floor(layers / k) + 2.0);
  if (kind == "log" && k >= 1) return std::min(all, std::ceil(k * std::log10(std::max(1.0, all))) + 2.0);
  if (kind == "list") return std::min(all, static_cast<double>(std::count(arg.begin(), arg.end(), ',') +
                                                              std::count(arg.begin(), arg.end(), ' ')) + 3.0);
  return 2.0;  // malformed: parse_schedule says so
}

std::vector<int> parse_schedule(const std::string& text, int layers) {
  const std::string key = "output.schedule";
  const std::string allowed = "allowed: all | every:K | log:K (K an integer >= 1) | list:a b c (layers in 0 .. L = " +
                              std::to_string(layers) + ")";
  const std::string t = trim(text);
  std::set<int> out = {0, layers};
  const auto colon = t.find(':');
  const std::string kind = trim(t.substr(0, colon));
  const std::string arg = colon == std::string::npos ? std::string() : trim(t.substr(colon + 1));
  if (t == "all") {
    for (int l = 1; l < layers; ++l) out.insert(l);
  } else if ((kind == "every" || kind == "log") && colon != std::string::npos) {
    const long long k = [&] {
      try {
        return parse_integer(key, arg);
      } catch (const UsageError&) {
        bad_value(key, text, allowed);
      }
    }();
    if (k < 1 || k > std::numeric_limits<int>::max()) bad_value(key, text, allowed);
    if (kind == "every") {
      for (long long l = k; l < layers; l += k) out.insert(static_cast<int>(l));
    } else {
      // K points per decade: round(10^(i/K)), i = 0, 1, ... while <= L. For large K many i
      // give the same layer: skip to the first i that can give the next one, so the loop runs
      // at most once per distinct layer (log:2147483647 no longer loops for minutes).
      const double kd = static_cast<double>(k);
      for (long long i = 0;;) {
        const double l = std::round(std::pow(10.0, static_cast<double>(i) / kd));
        if (l > layers) break;
        out.insert(static_cast<int>(l));
        // round(10^(i/K)) > l needs 10^(i/K) >= l + 0.5, i.e. i >= K log10(l + 0.5).
        const long long next = static_cast<long long>(std::ceil(kd * std::log10(l + 0.5)));
        i = std::max(i + 1, next - 1);  // one step early against rounding in log10
      }
    }
  } else if (kind == "list" && colon != std::string::npos) {
    std::string items = arg;
    std::replace(items.begin(), items.end(), ',', ' ');
    std::istringstream is(items);
    std::string tok;
    int count = 0;
    while (is >> tok) {
      long long l = -1;
      try {
        l = parse_integer(key, tok);
      } catch (const UsageError&) {
        bad_value(key, text, "'" + tok + "' is not an integer; " + allowed);
      }
      if (l < 0 || l > layers) bad_value(key, text, "layer " + tok + " outside 0 .. L = " + std::to_string(layers));
      out.insert(static_cast<int>(l));
      ++count;
    }
    if (count == 0) bad_value(key, text, "list: needs one or more layers; " + allowed);
  } else {
    bad_value(key, text, allowed);
  }
  return {out.begin(), out.end()};
}
ParsedArgs parse_config_sources(const std::vector<std::string>& cli_args,
                                const std::optional<std::string>& config_file,
                                const std::vector<KeyDecl>& command_options, const std::string& args_where) {
  std::vector<KeyDecl> keys = config_keys();
  keys.push_back(sweep_mode_key());
  keys.insert(keys.end(), command_options.begin(), command_options.end());

  ParsedArgs out;
  for (const KeyDecl& k : command_options) out.options[k.key] = k.default_value;
  std::map<std::string, std::vector<std::string>> sweep_axes;
  std::vector<std::string> sweep_order;
  auto absorb = [&](const std::vector<KeyEntry>& entries, const std::string& where) {
    for (const KeyEntry& e : entries) {
      const std::string& key = e.key;
      const std::string& value = e.value;
      if (key == "sweep.mode") {
        const auto& modes = sweep_mode_key().choices;
        if (std::find(modes.begin(), modes.end(), value) == modes.end())
          bad_value("sweep.mode", value, "allowed: " + sweep_mode_key().allowed());
        out.sweep_mode = value;
      } else if (out.options.count(key)) {
        out.options[key] = value;
      } else if (!e.known) {
        if (key.rfind("sweep.", 0) == 0 && is_known_key(key.substr(6))) {
          const std::string axis = key.substr(6);
          auto values = split_list(value);
          if (values.empty()) bad_value(key, value, "expected a comma-separated list of values");
          if (!sweep_axes.count(axis)) sweep_order.push_back(axis);
          sweep_axes[axis] = values;
        } else {
          throw UsageError(unknown_key_message(key, where));
        }
      } else {
        out.values[key] = value;
      }
    }
  };
  if (config_file)
    absorb(read_ini_entries(*config_file, keys), "in configuration file '" + printable(*config_file) + "'");
  // Command line after the file: it overwrites the file's values.
  absorb(read_command_line_entries(cli_args, keys, nullptr, args_where), args_where);
  for (const auto& axis : sweep_order) out.sweep.emplace_back(axis, sweep_axes[axis]);
  return out;
}

}  // namespace rcsim
