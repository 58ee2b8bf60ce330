#include "config/key_sources.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <boost/program_options.hpp>

#include "config/values.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace po = boost::program_options;

namespace rcsim {

namespace {

po::options_description describe_keys(const std::vector<KeyDecl>& keys) {
  po::options_description desc;
  for (const auto& k : keys) desc.add_options()(k.key.c_str(), po::value<std::string>());
  return desc;
}

std::vector<KeyEntry> entries_of(const po::parsed_options& parsed, const std::vector<KeyDecl>& keys,
                                 const std::string& where) {
  std::vector<KeyEntry> out;
  for (const auto& opt : parsed.options) {
    if (opt.value.size() > 1) throw UsageError("key '" + printable(opt.string_key) + "' " + where + ": give one value");
    KeyEntry e{opt.string_key, opt.value.empty() ? std::string() : opt.value.front(), !opt.unregistered};
    if (e.known) e.known = std::any_of(keys.begin(), keys.end(), [&](const KeyDecl& k) { return k.key == e.key; });
    out.push_back(std::move(e));
  }
  return out;
}

// The file's text for Boost: INI comments, a line starting with '#' (Boost's) or with ';' (the
// INI convention; ';' inside a value separates matrix rows, so only whole-line ';' comments are
// dropped). A UTF-8 byte-order mark at the start (some editors write one) is skipped. A key given
// twice is refused naming both lines (Boost would silently keep one of them).
std::string checked_ini_text(const std::string& config_file) {
  const std::string name = printable(config_file);
  std::error_code ec;
  if (std::filesystem::is_directory(config_file, ec))
    throw UsageError("configuration file '" + name + "' is a directory; an INI file is expected");
  std::ifstream file(config_file);
  if (!file) throw UsageError("cannot read configuration file '" + name + "'");
  std::ostringstream text;
  std::map<std::string, int> first_line;  // full key ("section.name") -> line number
  std::string section;
  int number = 0;
  for (std::string line; std::getline(file, line);) {
    ++number;
    if (number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    const auto first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] == ';') line.clear();
    std::string body = line.substr(0, line.find('#'));
    body = trim(body);
    if (!body.empty() && body.front() == '[' && body.back() == ']') {
      section = trim(body.substr(1, body.size() - 2));
    } else if (const auto eq = body.find('='); eq != std::string::npos) {
      const std::string key = (section.empty() ? "" : section + ".") + trim(body.substr(0, eq));
      const auto [it, fresh] = first_line.emplace(key, number);
      if (!fresh)
        throw UsageError("configuration file '" + name + "': key '" + printable(key) + "' is given twice (" + name +
                         ":" + std::to_string(it->second) + " and " + name + ":" + std::to_string(number) +
                         "); keep one of them");
    }
    text << line << "\n";
  }
  if (file.bad()) throw UsageError("cannot read configuration file '" + name + "'");
  return text.str();
}

}  // namespace

std::vector<KeyEntry> read_ini_entries(const std::string& file, const std::vector<KeyDecl>& keys) {
  const std::string name = printable(file);
  std::istringstream in(checked_ini_text(file));
  try {
    return entries_of(po::parse_config_file(in, describe_keys(keys), /*allow_unregistered=*/true), keys,
                      "in configuration file '" + name + "'");
  } catch (const po::error& e) {
    throw UsageError("configuration file '" + name + "': " + printable(e.what(), 2 * kEchoLimit));
  }
}

std::vector<KeyEntry> read_command_line_entries(const std::vector<std::string>& args, const std::vector<KeyDecl>& keys,
                                                std::vector<std::string>* positionals, const std::string& where) {
  // A flag given alone (--no-write) is --no-write=true; never followed by its value as the next
  // argument (that is a file name: rcsim analyze --no-write run.h5). "--key=" is the empty value,
  // as "key =" is in a file (Boost refuses an empty value after '=').
  std::vector<std::string> spelled;
  std::vector<std::string> emptied;
  for (std::string a : args) {
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.find('=') == a.size() - 1) {
      emptied.push_back(a.substr(2, a.size() - 3));
      continue;
    }
    for (const KeyDecl& k : keys)
      if (k.flag && a == "--" + k.key) a += "=true";
    spelled.push_back(a);
  }
  try {
    const po::parsed_options parsed = po::command_line_parser(spelled)
                                          .options(describe_keys(keys))
                                          .style(po::command_line_style::unix_style &
                                                 ~po::command_line_style::allow_guessing)
                                          .allow_unregistered()
                                          .run();
    po::parsed_options options(nullptr);
    for (const std::string& key : emptied) {
      po::option empty(key, {std::string()});
      empty.unregistered = std::none_of(keys.begin(), keys.end(), [&](const KeyDecl& k) { return k.key == key; });
      options.options.push_back(empty);
    }
    for (const auto& opt : parsed.options) {
      if (opt.position_key >= 0 || opt.string_key.empty()) {
        const std::string arg = opt.original_tokens.empty() ? std::string() : opt.original_tokens.front();
        if (!positionals)
          throw UsageError("unexpected argument '" + printable(arg) + "' (keys are given as --key=value)");
        positionals->push_back(arg);
      } else {
        options.options.push_back(opt);
      }
    }
    // A key given twice is refused naming it (as in a configuration file), never one kept silently.
    std::map<std::string, std::string> given;
    for (const auto& opt : options.options) {
      const std::string value = opt.value.empty() ? std::string() : opt.value.front();
      const auto [it, fresh] = given.emplace(opt.string_key, value);
      if (!fresh)
        throw UsageError("key '" + printable(opt.string_key) + "' is given twice " + where + " (--" +
                         printable(opt.string_key) + "=" + printable(it->second) + " and --" + printable(opt.string_key) +
                         "=" + printable(value) + "); keep one of them");
    }
    return entries_of(options, keys, where);
  } catch (const po::error& e) {
    throw UsageError("keys " + where + ": " + printable(e.what(), 2 * kEchoLimit));
  }
}

KeyValues parse_command_options(const std::string& command, const std::vector<KeyDecl>& keys,
                                const std::vector<std::string>& args, const std::optional<std::string>& config_file,
                                std::vector<std::string>* positionals) {
  KeyValues v;
  for (const auto& k : keys) v[k.key] = k.default_value;
  auto absorb = [&](const std::vector<KeyEntry>& entries, const std::string& where) {
    for (const KeyEntry& e : entries) {
      if (!e.known) {
        std::string allowed;
        for (const auto& k : keys) allowed += (allowed.empty() ? "" : ", ") + k.key;
        throw UsageError("unknown key '" + printable(e.key) + "'" + where + " (allowed: " + allowed + ")");
      }
      v[e.key] = e.value;
    }
  };
  try {
    if (config_file)
      absorb(read_ini_entries(*config_file, keys), " in configuration file '" + printable(*config_file) + "'");
    absorb(read_command_line_entries(args, keys, positionals), "");
  } catch (const UsageError& e) {
    throw UsageError("rcsim " + command + ": " + e.what());
  }
  return v;
}

}  // namespace rcsim
