#include "cli/commands.hpp"

#include <spdlog/spdlog.h>

#include <iostream>
#include <string>

#include "cli/command_table.hpp"
#include "io/inputs.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/model/mask_ranges.hpp"
#include "kernel/support/memory.hpp"

namespace rcsim {

namespace {

const char* kMaskInfoHelp = R"(usage: rcsim mask-info [--config FILE] [--key=value ...]

  Print the attention mask of the configuration, its centre nodes, radius and whether it is
  quasi-strongly connected. Another key than those below is refused on the command line and, in
  a configuration file written for rcsim run, ignored with a warning.
)";

}  // namespace

int cmd_mask_info(const Invocation& inv) {
  ParsedArgs p = resolve_sources(inv);
  drop_overridden_axes(p, inv);
  drop_unused_file_keys("mask-info", p);  // those of the command line are refused (command_table.cpp)
  if (!p.sweep.empty())
    spdlog::warn("mask-info: the [sweep] section of the configuration file is not used, ignored (the mask of its "
                 "base configuration is shown)");
  const Config c = make_config(p.values);
  const int n = c.model.tokens;
  MaskGraph g;
  MaskMatrix shown;        // the matrix printed for N <= 64
  long long allowed = 0;   // its nonzero entries
  if (c.mask.type == MaskType::custom) {
    // The mask (1 byte per entry) and the graph search (a few ints per entry in the worst case).
    const double n2 = static_cast<double>(n) * n;
    require_memory(n2 * 6.0, "mask-info for N = " + std::to_string(n), "choose fewer model.tokens");
    const MaskMatrix m = load_mask(c);
    g = analyse_mask(m);
    allowed = m.cast<long long>().sum();
    if (n <= 64) shown = m;
  } else {  // a built-in mask: its ranges, O(N) (kernel/model/mask_ranges.hpp)
    // The row and column ranges (16 bytes per token each), the searches' distances, queue and
    // unvisited set, the centres and their bounds: under 80 bytes per token.
    require_memory(80.0 * n, "mask-info for N = " + std::to_string(n), "choose fewer model.tokens");
    const MaskRanges rows = builtin_mask_ranges(c.mask.type, n, c.mask.window);
    g = analyse_mask(rows, builtin_mask_ranges(c.mask.type, n, c.mask.window, true));
    for (std::size_t k = 0; k < rows.lo.size(); ++k) allowed += rows.hi[k] - rows.lo[k];
    if (n <= 64) shown = dense_mask(rows);
  }
  std::cout << "mask: " << to_string(c.mask.type);
  if (c.mask.type == MaskType::sliding_window || c.mask.type == MaskType::unidirectional_sliding_window)
    std::cout << " (window " << c.mask.window << ")";
  std::cout << ", N = " << n << "\n";
  if (n <= 64) {
    for (int i = 0; i < n; ++i) {
      std::cout << "  ";
      for (int j = 0; j < n; ++j) std::cout << (shown(i, j) ? '1' : '.');
      std::cout << "\n";
    }
  } else {
    std::cout << "  (" << allowed << " allowed entries of " << static_cast<long long>(n) * n
              << "; matrix not shown for N > 64)\n";
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


std::string mask_info_help() {
  std::string names;
  for (const KeyDecl& k : config_keys())
    if (k.used_by("mask-info")) names += (names.empty() ? "" : ", ") + k.key;
  return kMaskInfoHelp + hanging_text("\nkeys (rcsim --help-keys: defaults and meanings):", names, 2, 0);
}

}  // namespace rcsim
