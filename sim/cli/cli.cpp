#include "app/run.hpp"
#include "io/inputs.hpp"
#include "cli/cli.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>


#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

#include "app/analysis.hpp"
#include "cli/cli_geometry.hpp"
#include "config/config.hpp"
#include "app/equilibria.hpp"
#include "app/sweep_analysis.hpp"
#include "kernel/errors.hpp"
#include "io/isolated.hpp"
#include "app/logger.hpp"
#include "kernel/memory.hpp"
#include "kernel/printable.hpp"
#include "io/output_file.hpp"
#include "io/safe_file.hpp"
#include "io/hdf5_file.hpp"
#include "kernel/weights.hpp"
#include "kernel/mask.hpp"
#include "io/run_file.hpp"
#include "app/parallel.hpp"
#include "app/progress.hpp"
#include "config/sweep.hpp"
#include "io/sweep_index.hpp"
#include "kernel/version.hpp"

namespace rcsim {

namespace {

std::atomic<bool> g_cancel{false};

// Longest error line printed (each quoted value in it is cut at kEchoLimit already).
constexpr std::size_t kMessageLimit = 2000;

extern "C" void on_signal(int sig) {
  g_cancel.store(true);
  std::signal(sig, SIG_DFL);  // a second Ctrl-C ends the process at once
}

const char* kOverview = R"(rcsim: simulator of rank collapse in deep self-attention

usage: rcsim COMMAND [--config FILE] [--key=value ...] [options]

commands:
  run           simulate trials of an L-layer attention stack; every layer's measures to HDF5
  sweep         the same as run (a configuration with a [sweep] section runs every point)
  mask-info     print the mask, its centre nodes, radius and connectivity
  equilibria    iterate fixed weights to equilibria; classify them and their basins
  analyze       decay rates (exponential phase found automatically), collapse depth and the
                theory bound of run files or sweep directories; a table per sweep
)";

const char* kOverviewEnd = R"(
  rcsim COMMAND --help   the command's usage, options and keys
  rcsim --help-keys      every configuration key of run/sweep/mask-info/equilibria with its
                         default and meaning
  rcsim --version

exit status: 0 success, 1 runtime error, 2 usage error, 130 interrupted.
)";

const char* kRunHelp = R"(usage: rcsim run [--config FILE] [--key=value ...] [--dry-run] [--force] [--quiet]
       rcsim sweep ...   (the same)

  Simulate run.trials independent trials of an L-layer attention stack and write the measures
  of every layer to output.file (HDF5). Without --config: one run of the key defaults
  (configs/default.ini is the comparison sweep of scripts/run-default.sh). A [sweep] section
  (sweep.KEY = v1, v2, ...) runs one file per point into the directory output.file minus
  ".h5", with an index (index.h5); completed points are skipped on rerun. Under mpirun (built
  with -DRCSIM_MPI=ON) the points are shared among the ranks.

options:
  --config FILE   INI file: [section] key = value, for the dotted keys
  --key=value     any configuration key (also --key value); the command line wins over the file
  --dry-run       print the resolved configuration and planned outputs; write nothing
  --force         recompute complete outputs; overwrite outputs (or a sweep index) of another
                  configuration, or files that are not complete rcsim run files
  --quiet         only warnings and errors on stderr (no progress)
)";

const char* kMaskInfoHelp = R"(usage: rcsim mask-info [--config FILE] [--key=value ...]

  Print the attention mask of the configuration (mask.type, mask.window, model.tokens, ...),
  its centre nodes, radius and whether it is quasi-strongly connected.
)";

const char* kEquilibriaHelp = R"(usage: rcsim equilibria --config FILE [--key=value ...] [--tol=X] [--perturbation=X]
                        [--probes=K] [--match-tol=X] [--rank-rtol=X] [--verbose] [--dry-run] [--force]

  Under fixed weights (weights.q/k/v = fixed, zero or identity), iterate run.trials random
  starting points (init.*) for at most model.layers layers until ||X(t+1) - X(t)||_F < --tol;
  classify each end state (rank, identical/antipodal/distinct tokens, stability under
  perturbations) and write end states, distinct equilibria and basin fractions to output.file
  (docs/science/equilibria.md). Prints a summary (equilibria by rank and type, basin fractions) after
  the table of distinct equilibria, whose first 20 rows are shown unless --verbose.

options:
  --tol=X           convergence tolerance (default 1e-12)
  --perturbation=X  relative size of the stability probes (default 1e-6)
  --probes=K        perturbations per end state (default 4)
  --match-tol=X     distance under which two end states are the same equilibrium
  --rank-rtol=X     relative tolerance of the numerical rank (default 1e-8)
  --verbose         print every row of the table of distinct equilibria
  --dry-run, --force, --quiet   as for run
)";

const char* kAnalyzeHelp = R"(usage: rcsim analyze RUN.h5|SWEEP_DIR [...] [--threshold=X] [--window=auto|fixed|FROM:TO]
                     [--no-write]

  Decay rates of mu and rank_one_residual (per trial and ensemble), collapse depth (first layer
  with mu_rel < --threshold, default 1e-3) and the theory bound C (1 - eps^r)^(t/r). Prints a
  table and writes /analysis into each run file (atomically). A sweep directory analyses each
  complete point of its index and writes one table, a row per point, next to the index:
  DIR/analysis.csv and DIR/analysis.h5. Among run files (a glob like data/depth/*.h5) the
  sweep's index.h5 and analysis.h5 are skipped. Warns when a fit is poor (docs/user/analysis.md).

options:
  --threshold=X   collapse threshold on mu_rel, in (0, 1) (default 1e-3)
  --window=auto   (default) fit the exponential phase: the straight stretch of ln y that
                  covers the most decay, before the round-off floor
  --window=fixed  skip the first 10% of the usable depth, stop before the floor
  --window=A:B    fit the recorded layers A..B
  --no-write      only print
)";

// The configuration keys' names by section, wrapped: the short form for `rcsim run --help`.
std::string key_names_by_section() {
  std::ostringstream os;
  std::string section, line;
  auto flush = [&] {
    if (!line.empty()) os << line << "\n";
    line.clear();
  };
  for (const auto& k : config_keys()) {
    const auto dot = k.key.find('.');
    const std::string sec = k.key.substr(0, dot), name = k.key.substr(dot + 1);
    if (sec != section) {
      flush();
      section = sec;
      line = "  " + sec + ":";
    } else {
      line += ",";
    }
    if (line.size() + name.size() + 1 > 96) {
      flush();
      line = "     ";
    }
    line += " " + name;
  }
  flush();
  os << "  sweep: mode, and sweep.KEY = v1, v2, ... for any key\n";
  return os.str();
}

// Every key of run, sweep, mask-info and equilibria, and the [sweep] section's mode.
std::vector<KeyDecl> run_keys() {
  std::vector<KeyDecl> keys = config_keys();
  keys.push_back(sweep_mode_key());
  return keys;
}

std::string keys_help_text() {
  return "configuration keys of run, sweep, mask-info and equilibria (default; meaning; allowed values):\n" +
         keys_help_plain(run_keys());
}

std::string help_text() {
  std::ostringstream os;
  os << kOverview << geometry_command_summaries() << kOverviewEnd;
  return os.str();
}

// `rcsim COMMAND --help`.
std::string command_help(const std::string& command) {
  if (command == "run" || command == "sweep")
    return std::string(kRunHelp) + "\nconfiguration keys (rcsim --help-keys: defaults and meanings):\n" +
           key_names_by_section();
  if (command == "mask-info") return kMaskInfoHelp;
  if (command == "equilibria") return kEquilibriaHelp;
  if (command == "analyze") return kAnalyzeHelp;
  if (is_geometry_command(command)) return geometry_command_help(command);
  throw UsageError("unknown command '" + command +
                   "' (allowed: run, sweep, mask-info, equilibria, analyze, keys, brody-map, brody-example, ln-geometry; see rcsim --help)");
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

// Cost estimate of a point, for balancing the points over MPI ranks: trials x layers x the
// flops of one layer (scores N^2 d_k, values N d^2 + N^2 d per head) and of its measures.
double point_cost(const Config& c) {
  const double N = c.model.tokens, d = c.model.dim, dk = c.model.key_dim, H = c.model.heads;
  const double layer = H * (2 * N * d * dk + N * N * dk + N * d * d + N * N * d) + N * d * std::min(N, d);
  return static_cast<double>(c.run.trials) * static_cast<double>(c.model.layers) * layer;
}

int cmd_run(const Invocation& inv, const std::vector<std::string>& args) {
  ParsedArgs p = resolve_sources(inv);
  drop_overridden_axes(p, inv);
  const bool is_sweep = !p.sweep.empty();
  std::vector<SweepPoint> points;
  if (!is_sweep) {
    SweepPoint single;
    single.config = make_config(p.values);
    single.name = single.config.output.file;
    points.push_back(std::move(single));
  } else {
    points = expand_sweep(p.values, p.sweep, p.sweep_mode);
  }
  const std::size_t n = points.size();
  const int rank = mpi::rank(), ranks = mpi::size();
  const bool root = rank == 0;
  if (ranks > 1) spdlog::default_logger()->set_pattern("rcsim[" + std::to_string(rank) + "/" + std::to_string(ranks) + "]: %^%l%$: %v");

  // Every point's input files (init.file, weights.file, mask.file) read and checked before
  // anything is locked, created or computed: a bad weights.file under a sweep is one error
  // (each distinct combination of files and shapes is read once; points already complete
  // with this configuration are skipped unless --force).
  {
    std::set<std::string> checked;
    for (std::size_t i = 0; i < n; ++i) {
      const Config& c = points[i].config;
      if (!inv.force && check_run_file(c.output.file, c.to_ini(), input_digests(c)).state == RunFileState::matches)
        continue;
      std::ostringstream sig;
      sig << to_string(c.mask.type) << '\0' << c.mask.file << '\0' << to_string(c.init.type) << '\0' << c.init.file << '\0'
          << c.weights.file << '\0' << to_string(c.weights.q.type) << to_string(c.weights.k.type)
          << to_string(c.weights.v.type) << '\0' << c.model.tokens << ' ' << c.model.dim << ' ' << c.model.key_dim << ' '
          << c.model.layers << ' ' << c.model.heads << ' ' << c.run.trials;
      if (!checked.insert(sig.str()).second) continue;
      if (c.mask.type == MaskType::custom) (void)load_mask(c);
      (void)load_inputs(c);
    }
  }

  // What is on disk already: complete files of the same or of another configuration, and
  // the sweep index with its definition. Rank 0 looks and tells the others (one collective,
  // which also guarantees that every rank has the same view before any rank writes a file).
  if (inv.dry_run && !root) return 0;
  std::string index_path, definition;
  std::optional<std::string> stored_definition;
  std::optional<ExclusiveLock> sweep_lock;
  if (is_sweep) {
    index_path = sweep_index_path(std::filesystem::path(points.front().config.output.file).parent_path().string());
    definition = sweep_definition(points, p.sweep, p.sweep_mode);
    if (root && !inv.dry_run) {  // one sweep per directory at a time: the second stops here
      const std::string dir = std::filesystem::path(index_path).parent_path().string();
      std::error_code ec;
      if (!dir.empty()) std::filesystem::create_directories(dir, ec);
      sweep_lock.emplace(lock_path_for(index_path), "sweep directory '" + (dir.empty() ? "." : dir) + "'");
      remove_stale_temporaries(index_path);
    }
    if (root) stored_definition = read_sweep_definition(index_path);
  }
  std::vector<RunFileCheck> checks(n);
  if (root)
    for (std::size_t i = 0; i < n; ++i) {  // the identity: configuration and the inputs' content
      const Config& c = points[i].config;
      checks[i] = check_run_file(c.output.file, c.to_ini(), input_digests(c));
    }
  bool definition_differs = stored_definition && *stored_definition != definition;
  if (!inv.dry_run) {
    std::vector<int> v;
    for (const RunFileCheck& ch : checks) v.push_back(static_cast<int>(ch.state));  // 0 on ranks > 0
    v.push_back(definition_differs ? 1 : 0);
    mpi::max_all(v);
    for (std::size_t i = 0; i < n; ++i) checks[i].state = static_cast<RunFileState>(v[i]);
    definition_differs = v[n] != 0;
  }
  std::vector<PointStatus> status(n, PointStatus::pending);
  for (std::size_t i = 0; i < n; ++i)
    if (checks[i].state == RunFileState::matches && !inv.force) status[i] = PointStatus::complete;

  if (inv.dry_run) {
    std::cout << points.front().config.to_ini() << "\n";
    if (is_sweep) std::cout << "# sweep (" << p.sweep_mode << "): " << n << " points; index " << index_path << "\n";
    int complete = 0;
    for (std::size_t i = 0; i < n; ++i) {
      std::string what = checks[i].state == RunFileState::matches   ? "complete"
                         : checks[i].state == RunFileState::differs ? "complete, DIFFERENT configuration (" + checks[i].difference + ")"
                                                                    : "pending";
      if (checks[i].state == RunFileState::matches && inv.force) what = "complete, recomputed (--force)";
      complete += status[i] == PointStatus::complete;
      std::cout << "# " << (is_sweep ? "  " : "output: ") << points[i].config.output.file << "  [" << what
                << "]  memory: about " << format_bytes(run_memory_bytes(points[i].config)) << "\n";
    }
    std::cout << "# this machine's memory: " << format_bytes(physical_memory_bytes()) << "\n";
    if (is_sweep) std::cout << "# " << complete << " of " << n << " points complete, " << n - static_cast<std::size_t>(complete) << " to run\n";
    if (definition_differs)
      std::cout << "# the index holds a different sweep definition (" << first_difference(*stored_definition, definition)
                << "): a run is refused without --force\n";
    return 0;
  }
  // Before any computing: never replace a foreign file or anything that is not a regular file;
  // refuse a point that cannot fit in memory.
  for (const SweepPoint& pt : points) {
    h5::check_replaceable(pt.config.output.file, "output.file", "rcsim-run", inv.force);
    require_run_memory(pt.config);
  }
  if (is_sweep) {
    require_regular_or_absent(index_path, "");
    if (!inv.force && path_exists(index_path) && !is_sweep_index(index_path))
      throw UsageError("sweep index '" + index_path +
                       "' exists and is not an rcsim sweep index; refusing to overwrite it (remove it, choose another "
                       "output.file, or rerun with --force)");
  }
  if (!inv.force) {
    const std::string what = "details in rank 0's message";
    if (definition_differs)
      throw UsageError("sweep index '" + index_path + "' was written for a different sweep definition (" +
                       (root ? first_difference(*stored_definition, definition) : what) +
                       "); rerun with --force to recompute every point, or choose another output.file");
    for (std::size_t i = 0; i < n; ++i)
      if (checks[i].state == RunFileState::differs)
        throw UsageError("'" + points[i].config.output.file + "' is complete but was made with a different configuration (" +
                         (root ? checks[i].difference : what) +
                         "); rerun with --force to overwrite it, or choose another output.file");
  }

  auto status_ints = [&] {
    std::vector<int> v;
    for (const PointStatus st : status) v.push_back(static_cast<int>(st));  // pending < complete < failed
    return v;
  };
  auto set_status = [&](const std::vector<int>& v) {
    for (std::size_t i = 0; i < n; ++i) status[i] = static_cast<PointStatus>(v[i]);
  };
  int exit_code = 0, interrupted = 0, failed = 0;
  auto write_index = [&] {
    if (!is_sweep || !root) return;
    try {
      write_sweep_index(index_path, definition, p.sweep_mode, p.sweep, points, status);
    } catch (const std::exception& e) {  // the point files stay the authority; keep going (MPI: no hang)
      spdlog::error("cannot write the sweep index: {}", printable(e.what(), kMessageLimit));
      exit_code = std::max(exit_code, 1);
    }
  };
  write_index();

  // This rank's points: the pending ones, balanced over the ranks by estimated cost.
  std::vector<std::size_t> todo, mine;
  for (std::size_t i = 0; i < n; ++i)
    if (status[i] == PointStatus::pending) todo.push_back(i);
  std::vector<double> costs;
  for (const std::size_t i : todo) costs.push_back(point_cost(points[i].config));
  const std::vector<int> owner = mpi::assign_balanced(costs, ranks);
  long my_trials = 0;
  for (std::size_t k = 0; k < todo.size(); ++k)
    if (owner[k] == rank) {
      mine.push_back(todo[k]);
      my_trials += points[todo[k]].config.run.trials;
    }
  if (ranks > 1) spdlog::info("{} of {} pending points on this rank", mine.size(), todo.size());

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  Provenance prov;
  prov.command_line = command_line_text(args);
  const bool keep_going = is_sweep || ranks > 1;  // a failed point does not stop the others
  {
    Progress progress(Progress::mode_for(inv.quiet), my_trials, static_cast<int>(mine.size()));
    for (const std::size_t i : mine) {
      if (g_cancel.load()) {
        interrupted = 1;
        break;
      }
      const Config& c = points[i].config;
      progress.begin_point(points[i].name, c.run.trials);
      const auto start = std::chrono::steady_clock::now();
      try {
        run_to_file(c, prov, &g_cancel, &progress);
        progress.end_point();
        progress.clear();
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        spdlog::info("wrote {} ({} trials, {} layers, {:.2f} s)", c.output.file, c.run.trials, c.model.layers, secs);
        status[i] = PointStatus::complete;
      } catch (const Interrupted&) {
        if (!keep_going) throw;
        interrupted = 1;
        break;
      } catch (const std::exception& e) {
        if (!keep_going) throw;
        progress.end_point();
        progress.clear();
        spdlog::error("point {} failed: {}", printable(points[i].name), printable(e.what(), kMessageLimit));
        status[i] = PointStatus::failed;
        exit_code = std::max(exit_code, dynamic_cast<const UsageError*>(&e) ? 2 : 1);
      }
      if (ranks == 1) write_index();  // atomically, after every point
    }
  }
  if (ranks > 1) {  // rank 0 gathers the statuses and writes the index
    std::vector<int> v = status_ints();
    v.push_back(exit_code);
    v.push_back(interrupted);
    mpi::max_all(v);
    set_status(v);
    exit_code = v[n];
    interrupted = v[n + 1];
    write_index();
  }
  for (const PointStatus st : status) failed += st == PointStatus::failed;
  if (is_sweep && root) {
    int complete = 0;
    for (const PointStatus st : status) complete += st == PointStatus::complete;
    spdlog::info("sweep: {} of {} points complete ({} computed now, {} failed); index {}", complete, n,
                 complete - static_cast<int>(n - todo.size()), failed, index_path);
  }
  if (interrupted) throw Interrupted();
  return exit_code;
}

int cmd_mask_info(const Invocation& inv) {
  ParsedArgs p = resolve_sources(inv);
  drop_overridden_axes(p, inv);
  const Config c = make_config(p.values);
  // The mask (1 byte per entry) and the graph search (a few ints per entry in the worst case).
  const double n2 = static_cast<double>(c.model.tokens) * c.model.tokens;
  require_memory(n2 * 6.0, "mask-info for N = " + std::to_string(c.model.tokens), "choose fewer model.tokens");
  const MaskMatrix m = load_mask(c);
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
    std::cout << "  (" << m.cast<long long>().sum() << " allowed entries of " << static_cast<long long>(n) * n
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

// "--name value" as "--name=value" for a command's own options (as the configuration keys allow).
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

int cmd_equilibria(Invocation inv, const std::vector<std::string>& args) {
  EquilibriumOptions o;
  bool verbose = false;
  std::vector<std::string> keys;
  for (const std::string& a : join_option_values(inv.keys, {"--tol", "--perturbation", "--probes", "--rank-rtol", "--match-tol"})) {
    auto value = [&](const char* prefix) -> std::optional<double> {
      const std::string p = std::string(prefix) + "=";
      if (a.rfind(p, 0) != 0) return std::nullopt;
      return parse_number(prefix, a.substr(p.size()));
    };
    if (auto v = value("--tol")) o.tol = *v;
    else if (auto v2 = value("--perturbation")) o.perturbation = *v2;
    else if (auto v3 = value("--probes")) {
      constexpr double kMaxProbes = 1e6;  // each probe is a full iteration from a perturbed end state
      if (!(*v3 >= 1 && *v3 <= kMaxProbes) || *v3 != std::floor(*v3))
        throw UsageError("--probes=" + printable(a.substr(9)) + ": expected a whole number from 1 to 1000000");
      o.probes = static_cast<int>(*v3);
    } else if (auto v4 = value("--match-tol")) o.match_tol = *v4;
    else if (auto v5 = value("--rank-rtol")) o.rank_rtol = *v5;
    else if (a == "--verbose" || a == "-v") verbose = true;
    else keys.push_back(a);
  }
  validate(o);
  inv.keys = keys;
  ParsedArgs p = resolve_sources(inv);
  if (!p.sweep.empty()) throw UsageError("equilibria: a [sweep] section is not supported (one configuration at a time)");
  // Keys that change nothing in an equilibrium search (one attention layer with fixed weights,
  // iterated; no MLP, dropout, block structure, recorded layers or measures): refused on the
  // command line, where they were asked for; in a configuration file shared with `rcsim run`
  // they are ignored with a warning.
  {
    static const std::set<std::string> unused = {
        "dropout.attention", "dropout.output", "mlp.width", "mlp.activation", "mlp.bias", "norm.position",
        "norm.params", "weights.mlp", "weights.mlp_in_std", "weights.mlp_out_std", "weights.mlp_in_bias_std",
        "weights.mlp_out_bias_std", "weights.redraw_every", "weights.across_trials", "weights.shared",
        "run.threads", "run.precision", "output.tokens", "output.spectrum", "output.schedule", "output.measures",
        "output.attention", "metrics.rank_rtol", "metrics.rank_atol", "metrics.pair_threshold", "metrics.cluster_tau"};
    const ParsedArgs cli = parse_config_sources(inv.keys, std::nullopt);
    for (const auto& [key, value] : cli.values)
      if (unused.count(key))
        throw UsageError("equilibria: key '" + key + "' is not used by rcsim equilibria (one attention layer with "
                         "fixed weights, iterated); remove it (equilibria's options: --tol, --perturbation, --probes, "
                         "--match-tol, --rank-rtol, --verbose)");
    for (const auto& [key, value] : p.values)
      if (unused.count(key)) spdlog::warn("equilibria: key '{}' of the configuration file is not used, ignored", key);
  }
  const Config c = make_config(p.values);
  FixedLayerMap check(c);  // fixed weights, before anything is written
  (void)check;
  const InputDigests inputs = input_digests(c);  // the identity: configuration and inputs' content
  if (inv.dry_run) {
    std::cout << c.to_ini() << "\n# output: " << c.output.file << "\n";
    return 0;
  }
  const std::string& out = c.output.file;
  h5::check_replaceable(out, "output.file", "rcsim-equilibria", inv.force);
  if (!inv.force && std::filesystem::exists(out)) {
    try {
      const h5::File f = h5::File::open_read(out);
      const h5::Dataset config = f.open_dataset("config");
      const std::string digests = config.has_attr("input_sha256") ? config.attr_string("input_sha256") : "";
      if (f.has_attr("complete") && f.attr_int("complete") == 1 && f.read_string("config") == c.to_ini() &&
          digest_difference(digests, inputs).empty()) {
        spdlog::info("{} is complete with the same configuration: skipped (--force to recompute)", out);
        return 0;
      }
    } catch (const std::exception&) {
    }
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  OutputFile file(out, {"output.file", "output '" + out + "'"});  // fails fast on an unwritable directory
  const EquilibriumSearch s = find_equilibria(c, o, &g_cancel);
  check_inputs_unchanged(inputs);
  std::cout << equilibria_table(s, verbose) << std::flush;
  write_equilibria_file(file, c, o, s, command_line_text(args), inputs);
  spdlog::info("wrote {}", out);
  return 0;
}

int cmd_analyze(const Invocation& inv) {
  AnalysisOptions o;
  bool write = true;
  std::vector<std::string> files;
  for (const std::string& a : join_option_values(inv.keys, {"--threshold", "--window"})) {
    if (a.rfind("--threshold=", 0) == 0) {
      o.threshold = parse_number("--threshold", a.substr(12));
    } else if (a.rfind("--window=", 0) == 0) {
      const std::string w = a.substr(9);
      const auto colon = w.find(':');
      if (w == "auto" || w == "fixed") {
        o.window = w == "auto" ? AnalysisOptions::Window::automatic : AnalysisOptions::Window::fixed;
        continue;
      }
      if (colon == std::string::npos) throw UsageError("--window=" + w + ": expected auto, fixed or FROM:TO (layers)");
      o.window = AnalysisOptions::Window::layers;
      o.from = parse_number("--window", w.substr(0, colon));
      o.to = parse_number("--window", w.substr(colon + 1));
    } else if (a == "--no-write") {
      write = false;
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("analyze: unknown option '" + a + "' (allowed: --threshold=X, --window=auto|fixed|FROM:TO, --no-write)");
    } else {
      files.push_back(a);
    }
  }
  if (inv.config_file) throw UsageError("analyze takes run files or sweep directories, not --config");
  if (files.empty()) throw UsageError("analyze: no run file given (usage: rcsim analyze RUN.h5|SWEEP_DIR [...])");
  validate(o);
  // Sweep directories (their index lists the points), run files; an index or a sweep table met
  // among run files (a glob like data/depth/*.h5) is skipped.
  std::vector<SweepIndex> sweeps;
  std::vector<std::string> runs;
  for (const auto& path : files) {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (!std::filesystem::exists(st)) throw UsageError("analyze: '" + printable(path) + "': no such file or directory");
    // A FIFO, device or socket would block or stream forever in the readers below.
    if (!std::filesystem::is_directory(st) && !std::filesystem::is_regular_file(st))
      throw UsageError("analyze: '" + printable(path) +
                       "' is not a regular file (a FIFO, device or socket?); give run files or sweep directories");
    if (!std::filesystem::is_directory(path, ec))
      // First in a child process: libhdf5 can crash (not fail) reading a corrupted file's
      // metadata (e.g. a damaged variable-length attribute); then this is one error line.
      run_isolated(
          [&] {
            if (!is_sweep_index(path) && !h5::is_complete(path, "rcsim-sweep-analysis")) (void)analyze_run(path, o);
          },
          "reading run file '" + path + "'", isolated_time_limit(path));
    if (std::filesystem::is_directory(path, ec)) {
      const std::string index = sweep_index_path(path);
      if (!is_sweep_index(index))
        throw UsageError("'" + path + "': a directory without a sweep index (index.h5); give run files or a sweep directory");
      sweeps.push_back(read_sweep_index(index));
    } else if (is_sweep_index(path)) {
      spdlog::info("{}: a sweep index, skipped (give its directory to analyse the sweep and write its table)", path);
    } else if (h5::is_complete(path, "rcsim-sweep-analysis")) {
      spdlog::info("{}: a sweep's analysis table, skipped", path);
    } else {
      runs.push_back(path);
    }
  }
  // Every file read and checked before any is written.
  std::vector<RunAnalysis> results;
  // A sweep's points, like the files above, first in a child process.
  const auto checked_analysis = [&](const std::string& path) {
    run_isolated([&] { (void)analyze_run(path, o); }, "reading run file '" + path + "'", isolated_time_limit(path));
    return analyze_run(path, o);
  };
  for (const auto& path : runs) results.push_back(analyze_run(path, o));
  std::vector<std::vector<SweepAnalysisRow>> sweep_rows(sweeps.size());
  for (std::size_t s = 0; s < sweeps.size(); ++s) {
    const SweepIndex& index = sweeps[s];
    int skipped = 0;
    for (std::size_t i = 0; i < index.points.size(); ++i) {
      if (index.points[i].status != "complete") {
        ++skipped;
        continue;
      }
      sweep_rows[s].push_back({static_cast<int>(i), &index.points[i], checked_analysis(index.points[i].file)});
    }
    if (sweep_rows[s].empty())
      throw UsageError("sweep '" + index.directory + "': no complete point to analyse (" + std::to_string(skipped) +
                       " pending or failed; run the sweep first)");
    if (skipped) spdlog::info("sweep {}: {} points not complete, left out", index.directory, skipped);
  }
  auto finish = [&](const RunAnalysis& a, bool print_table) {
    if (print_table) std::cout << analysis_table(a, o);
    for (const std::string& w : fit_warnings(a, o)) spdlog::warn("{}", w);
    if (write) {
      write_analysis(a, o);
      spdlog::info("wrote /analysis into {}", a.path);
    }
  };
  for (const auto& a : results) finish(a, true);
  for (std::size_t s = 0; s < sweeps.size(); ++s) {
    std::cout << sweep_summary_table(sweeps[s], sweep_rows[s], o);
    for (const SweepAnalysisRow& r : sweep_rows[s]) finish(r.analysis, false);
    if (write)
      for (const std::string& p : write_sweep_table(sweeps[s], sweep_rows[s], o)) spdlog::info("wrote {}", p);
  }
  return 0;
}

}  // namespace

int cli_main(const std::vector<std::string>& args) {
  install_logger();
  // A write beyond the file-size limit (ulimit -f) fails with EFBIG and is reported like a full
  // disk, instead of killing the process halfway through a file.
  std::signal(SIGXFSZ, SIG_IGN);
  // Run files and checkpoints are written on disk by HDF5: a file whose close failed (full disk)
  // must not be closed again by HDF5 at exit (a crash after the clear error).
  h5::no_close_at_exit();
  try {
    const std::string missing = missing_instruction_sets();
    if (!missing.empty()) {
      std::cerr << "rcsim: error: this rcsim was built for " << instruction_set() << " but this CPU lacks " << missing
                << "; rebuild on this machine, or configure with -DRCSIM_NATIVE=OFF for a portable binary\n";
      return 1;
    }
    const Invocation inv = split_args(args);
    spdlog::set_level(inv.quiet ? spdlog::level::warn : spdlog::level::info);
    if (std::find(args.begin(), args.end(), "--version") != args.end()) {
      std::cout << "rcsim " << version() << " (git " << git_sha() << ", source " << source_tree()
                << ", isa=" << instruction_set() << ", " << compiler() << ", " << build_type() << ")\n";
      return 0;
    }
    if (std::find(args.begin(), args.end(), "--help-keys=markdown") != args.end()) {
      std::cout << keys_table_markdown(run_keys());
      return 0;
    }
    if (std::find(args.begin(), args.end(), "--help-keys") != args.end()) {
      std::cout << keys_help_text() << geometry_help_text();
      return 0;
    }
    if (inv.help && !inv.command.empty()) {
      std::cout << command_help(inv.command);
      return 0;
    }
    if (inv.help || inv.command.empty()) {
      std::cout << help_text();
      if (inv.command.empty() && !inv.help) {
        std::cerr << "rcsim: error: no command given (run, sweep, mask-info, equilibria, analyze, keys, brody-map, brody-example, ln-geometry)\n";
        return 2;
      }
      return 0;
    }
    if (inv.command == "run" || inv.command == "sweep") return cmd_run(inv, args);
    if (inv.command == "mask-info") return cmd_mask_info(inv);
    if (inv.command == "analyze") return cmd_analyze(inv);
    if (inv.command == "equilibria") return cmd_equilibria(inv, args);
    if (is_geometry_command(inv.command)) {
      if (inv.config_file) throw UsageError("rcsim " + inv.command + " takes no --config file (give its keys as --key=value)");
      // brody-map polls the cancel flag between draws; the other geometry commands do not, so they
      // keep the default action: SIGINT and SIGTERM end them at once (their output is written to
      // an exclusive temporary and renamed when complete; a rerun removes a stale temporary).
      if (inv.command == "brody-map") {
        std::signal(SIGINT, on_signal);
        std::signal(SIGTERM, on_signal);
      }
      return run_geometry_command(inv.command, inv.keys, command_line_text(args), inv.quiet, inv.force, &g_cancel);
    }
    throw UsageError("unknown command '" + inv.command +
                     "' (allowed: run, sweep, mask-info, equilibria, analyze, keys, brody-map, brody-example, ln-geometry; see rcsim --help)");
  } catch (const UsageError& e) {
    std::cerr << "rcsim: error: " << printable(e.what(), kMessageLimit) << "\n";
    return 2;
  } catch (const Interrupted&) {
    std::cerr << "rcsim: interrupted; completed outputs are kept and completed trials of the run in progress are "
                 "checkpointed (NAME.h5.partial): rerun the same command to resume\n";
    return 130;
  } catch (const std::bad_alloc&) {
    std::cerr << "rcsim: error: out of memory (a request for memory failed; "
                 "'rcsim run --dry-run' prints the estimated memory of a run)\n";
    return 1;
  } catch (const std::length_error& e) {
    std::cerr << "rcsim: error: out of memory (a size beyond what can be allocated: " << printable(e.what()) << ")\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "rcsim: error: " << printable(e.what(), kMessageLimit) << "\n";
    return 1;
  }
}

}  // namespace rcsim
