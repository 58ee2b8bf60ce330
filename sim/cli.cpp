#include "cli.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli_geometry.hpp"
#include "config.hpp"
#include "errors.hpp"
#include "mask.hpp"
#include "run_file.hpp"
#include "sweep.hpp"
#include "version.hpp"

namespace rcsim {

namespace {

std::atomic<bool> g_cancel{false};

extern "C" void on_signal(int sig) {
  g_cancel.store(true);
  std::signal(sig, SIG_DFL);  // a second Ctrl-C ends the process at once
}

const char* kUsage = R"(rcsim: simulator of rank collapse in deep self-attention

usage:
  rcsim run       [--config FILE] [--key=value ...] [--dry-run] [--force] [--quiet]
  rcsim sweep     (same as run; a configuration with a [sweep] section runs every point)
  rcsim mask-info [--config FILE] [--key=value ...]
  rcsim keys | brody-map | brody-example | ln-geometry [--key=value ...]   (see below)
  rcsim --help | --version

  run         simulate run.trials independent trials of an L-layer attention stack and write
              the measures of every layer to output.file (HDF5). Without --config, the
              built-in default (configs/default.ini) is the base configuration.
              A [sweep] section (sweep.KEY = v1, v2, ...) runs one file per point into the
              directory output.file minus ".h5"; completed points are skipped on rerun.
  mask-info   print the mask, its centre nodes, radius and connectivity.

options:
  --config FILE   INI file: [section] key = value, for the dotted keys below
  --key=value     any configuration key; the command line wins over the file
  --dry-run       print the resolved configuration and planned outputs; write nothing
  --force         recompute outputs that are already complete with the same configuration
  --quiet         only warnings and errors on stderr

exit status: 0 success, 1 runtime error, 2 usage error, 130 interrupted.

configuration keys (default; meaning):
)";

std::string help_text() {
  std::ostringstream os;
  os << kUsage;
  for (const auto& k : config_keys())
    os << "  --" << k.key << "  (default: " << (k.default_value.empty() ? "\"\"" : k.default_value) << ")\n      "
       << k.help << "\n";
  os << "  --sweep.mode  (default: product)\n      product | zip: how the lists of a [sweep] section combine\n";
  os << geometry_help_text();
  return os.str();
}

struct Invocation {
  std::string command;
  std::optional<std::string> config_file;
  bool dry_run = false, force = false, quiet = false, help = false;
  std::vector<std::string> keys;  // --key=value arguments for the configuration parser
};

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

// Configuration sources: the file (or the built-in default) then the command line.
ParsedArgs resolve_sources(const Invocation& inv) {
  if (inv.config_file) return parse_config_sources(inv.keys, inv.config_file);
  // The built-in default, through a temporary file so that it takes the same parser.
  const std::filesystem::path tmp =
      std::filesystem::temp_directory_path() / ("rcsim-default-" + std::to_string(::getpid()) + ".ini");
  {
    std::ofstream out(tmp);
    out << default_config_text();
  }
  try {
    ParsedArgs p = parse_config_sources(inv.keys, tmp.string());
    std::filesystem::remove(tmp);
    return p;
  } catch (...) {
    std::filesystem::remove(tmp);
    throw;
  }
}

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

int cmd_run(const Invocation& inv, const std::vector<std::string>& args) {
  ParsedArgs p = resolve_sources(inv);
  drop_overridden_axes(p, inv);
  std::vector<SweepPoint> points;
  if (p.sweep.empty()) {
    SweepPoint single;
    single.config = make_config(p.values);
    single.name = single.config.output.file;
    points.push_back(std::move(single));
  } else {
    points = expand_sweep(p.values, p.sweep, p.sweep_mode);
  }

  if (inv.dry_run) {
    std::cout << points.front().config.to_ini();
    if (!p.sweep.empty()) {
      std::cout << "\n# sweep (" << p.sweep_mode << "): " << points.size() << " points\n";
      for (const auto& pt : points) std::cout << "#   " << pt.config.output.file << "\n";
    } else {
      std::cout << "\n# output: " << points.front().config.output.file << "\n";
    }
    return 0;
  }

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  Provenance prov;
  prov.command_line = command_line_text(args);
  int done = 0, skipped = 0;
  for (const auto& pt : points) {
    const Config& c = pt.config;
    if (!inv.force && run_file_matches(c.output.file, c.to_ini())) {
      spdlog::info("{} is complete with the same configuration: skipped (--force to recompute)", c.output.file);
      ++skipped;
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    run_to_file(c, prov, &g_cancel, !inv.quiet);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("wrote {} ({} trials, {} layers, {:.2f} s)", c.output.file, c.run.trials, c.model.layers, secs);
    ++done;
  }
  if (points.size() > 1) spdlog::info("sweep: {} points computed, {} already complete", done, skipped);
  return 0;
}

int cmd_mask_info(const Invocation& inv) {
  ParsedArgs p = resolve_sources(inv);
  drop_overridden_axes(p, inv);
  const Config c = make_config(p.values);
  const MaskMatrix m = make_mask(c);
  const MaskGraph g = analyse_mask(m);
  const int n = static_cast<int>(m.rows());
  std::cout << "mask: " << to_string(c.mask.type);
  if (c.mask.type == MaskType::sliding_window || c.mask.type == MaskType::unidirectional_sliding_window)
    std::cout << " (window " << c.mask.window << ")";
  std::cout << ", N = " << n << "\n";
  if (n <= 64) {
    for (int i = 0; i < n; ++i) {
      std::cout << "  ";
      for (int j = 0; j < n; ++j) std::cout << (m(i, j) ? '1' : '.');
      std::cout << "\n";
    }
  } else {
    std::cout << "  (" << m.cast<int>().sum() << " allowed entries of " << n * n << "; matrix not shown for N > 64)\n";
  }
  std::cout << "quasi_strongly_connected: " << (g.quasi_strongly_connected ? "yes" : "no (the collapse theorem does not apply)") << "\n";
  std::cout << "centres:";
  for (int cn : g.centres) std::cout << " " << cn;
  std::cout << (g.centres.empty() ? " none" : "") << "\n";
  std::cout << "radius: " << g.radius;
  const int formula = radius_formula(c.mask.type, n, c.mask.window);
  if (formula >= 0) std::cout << " (table formula: " << formula << ")";
  std::cout << "\n";
  return 0;
}

}  // namespace

int cli_main(const std::vector<std::string>& args) {
  static const auto logger = [] {
    auto l = spdlog::stderr_color_mt("rcsim");
    l->set_pattern("rcsim: %^%l%$: %v");
    spdlog::set_default_logger(l);
    return l;
  }();
  (void)logger;
  try {
    const Invocation inv = split_args(args);
    spdlog::set_level(inv.quiet ? spdlog::level::warn : spdlog::level::info);
    if (std::find(args.begin(), args.end(), "--version") != args.end()) {
      std::cout << "rcsim " << version() << " (git " << git_sha() << ")\n";
      return 0;
    }
    if (inv.help || inv.command.empty()) {
      std::cout << help_text();
      if (inv.command.empty() && !inv.help) {
        std::cerr << "rcsim: error: no command given (run, sweep, mask-info, keys, brody-map, brody-example, ln-geometry)\n";
        return 2;
      }
      return 0;
    }
    if (inv.command == "run" || inv.command == "sweep") return cmd_run(inv, args);
    if (inv.command == "mask-info") return cmd_mask_info(inv);
    if (is_geometry_command(inv.command)) {
      if (inv.config_file) throw UsageError("rcsim " + inv.command + " takes no --config file (give its keys as --key=value)");
      std::signal(SIGINT, on_signal);
      std::signal(SIGTERM, on_signal);
      return run_geometry_command(inv.command, inv.keys, command_line_text(args), inv.quiet, &g_cancel);
    }
    throw UsageError("unknown command '" + inv.command +
                     "' (allowed: run, sweep, mask-info, keys, brody-map, brody-example, ln-geometry; see rcsim --help)");
  } catch (const UsageError& e) {
    std::cerr << "rcsim: error: " << e.what() << "\n";
    return 2;
  } catch (const Interrupted&) {
    std::cerr << "rcsim: interrupted; completed outputs are kept and completed trials of the run in progress are "
                 "checkpointed (NAME.h5.partial): rerun the same command to resume\n";
    return 130;
  } catch (const std::exception& e) {
    std::cerr << "rcsim: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace rcsim
