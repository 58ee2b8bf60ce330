#include "cli/invocation.hpp"

#include <algorithm>
#include <csignal>
#include <iomanip>
#include <sstream>
#include <string>

#include "kernel/support/errors.hpp"

namespace rcsim {

std::atomic<bool> g_cancel{false};

extern "C" void on_signal(int sig) {
  g_cancel.store(true);
  std::signal(sig, SIG_DFL);  // a second Ctrl-C ends the process at once
}

Invocation split_args(const std::vector<std::string>& args) {
  Invocation inv;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") inv.help = true;
    else if (a == "--dry-run") inv.dry_run = true;
    else if (a == "--force") inv.force = true;
    else if (a == "--quiet" || a == "-q") inv.quiet = true;
    else if (a == "--config") {
      if (i + 1 >= args.size()) throw UsageError("--config needs a file name");
      inv.config_file = args[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      inv.config_file = a.substr(9);
    } else if (inv.command.empty() && !a.empty() && a[0] != '-') {
      inv.command = a;
    } else {
      inv.keys.push_back(a);
    }
  }
  return inv;
}

// Configuration sources: the key defaults, then the file (if any), then the command line.
ParsedArgs resolve_sources(const Invocation& inv) { return parse_config_sources(inv.keys, inv.config_file); }

// A key given on the command line replaces a sweep axis of the same name.
void drop_overridden_axes(ParsedArgs& p, const Invocation& inv) {
  const ParsedArgs cli = parse_config_sources(inv.keys, std::nullopt);
  auto& axes = p.sweep;
  axes.erase(std::remove_if(axes.begin(), axes.end(), [&](const auto& axis) { return cli.values.count(axis.first) > 0; }),
             axes.end());
}

std::string command_line_text(const std::vector<std::string>& args) {
  std::string s = "rcsim";
  for (const auto& a : args) s += " " + a;
  return s;
}

double parse_number(const std::string& option, const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw UsageError(option + "=" + text + ": expected a number");
  return v;
}

std::vector<std::string> join_option_values(const std::vector<std::string>& args,
                                            std::initializer_list<const char*> options) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool takes_value =
        std::any_of(options.begin(), options.end(), [&](const char* o) { return args[i] == o; });
    if (takes_value && i + 1 < args.size()) {
      out.push_back(args[i] + "=" + args[i + 1]);
      ++i;
    } else {
      out.push_back(args[i]);
    }
  }
  return out;
}


std::string number_text(double x) {
  for (int digits = 1;; ++digits) {
    std::ostringstream os;
    os << std::setprecision(digits) << x;
    if (digits >= 17 || std::stod(os.str()) == x) return os.str();
  }
}

std::string hanging_text(const std::string& head, const std::string& text, std::size_t column, std::size_t gap) {
  std::ostringstream os;
  std::string line = head;
  if (line.size() + gap > column) {  // a long head: the text starts on the next line
    os << line << "\n";
    line.clear();
  }
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    if (line.size() < column) line.resize(column, ' ');
    else if (line.size() + 1 + word.size() > kHelpWidth) {
      os << line << "\n";
      line.assign(column, ' ');
    } else {
      line += ' ';
    }
    line += word;
  }
  os << line << "\n";
  return os.str();
}

std::string options_help(const std::vector<KeyDecl>& options) {
  std::ostringstream os;
  for (const KeyDecl& k : options) {
    std::string name = "--" + k.key;
    if (!k.flag) name += "=" + (k.allowed_text.empty() ? std::string("X") : k.allowed_text);
    std::string help = k.help;
    if (!k.flag && !k.default_value.empty()) help += " (default " + k.default_value + ")";
    os << hanging_text("  " + name, help, 20, 2);
  }
  return os.str();
}

std::string key_names_by_section(const std::vector<KeyDecl>& keys) {
  std::ostringstream os;
  std::string section, line;
  auto flush = [&] {
    if (!line.empty()) os << line << "\n";
    line.clear();
  };
  for (const auto& k : keys) {
    const auto dot = k.key.find('.');
    const std::string sec = k.key.substr(0, dot), name = k.key.substr(dot + 1);
    if (sec != section) {
      flush();
      section = sec;
      line = "  " + sec + ":";
    } else {
      line += ",";
    }
    if (line.size() + name.size() + 1 > kHelpWidth) {
      flush();
      line = "     ";
    }
    line += " " + name;
  }
  flush();
  return os.str();
}

// Every key of run, sweep, mask-info and equilibria, and the [sweep] section's mode.
std::vector<KeyDecl> run_keys() {
  std::vector<KeyDecl> keys = config_keys();
  keys.push_back(sweep_mode_key());
  return keys;
}

}  // namespace rcsim
