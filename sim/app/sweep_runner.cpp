#include "app/sweep_runner.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include "app/logger.hpp"
#include "app/parallel.hpp"
#include "app/progress.hpp"
#include "app/run.hpp"
#include "config/sweep.hpp"
#include "io/hdf5_file.hpp"
#include "io/inputs.hpp"
#include "io/run_file.hpp"
#include "io/safe_file.hpp"
#include "io/sweep_index.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/support/memory.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {

// Cost estimate of a point, for balancing the points over MPI ranks and for the progress's ETA
// (work, not trials: a depth sweep's deep points are not estimated at its shallow points' rate):
// trials x (layers x the flops of one block (scores N^2 d_k, values N d^2 + N^2 d per head) + (layers + 1)
// x those of the measures (N d min(N, d): an SVD), which are taken at X(0) too).
double point_cost(const Config& c) {
  const double N = c.model.tokens, d = c.model.dim, dk = c.model.key_dim, H = c.model.heads;
  const double L = c.model.layers;
  const double block = H * (2 * N * d * dk + N * N * dk + N * d * d + N * N * d), measures = N * d * std::min(N, d);
  return static_cast<double>(c.run.trials) * (L * block + (L + 1) * measures);
}

// The points of a run: the one configuration, or every point of its [sweep] section.
std::vector<SweepPoint> plan_points(const ParsedArgs& p) {
  std::vector<SweepPoint> points;
  if (p.sweep.empty()) {
    SweepPoint single;
    single.config = make_config(p.values);
    single.name = single.config.output.file;
    points.push_back(std::move(single));
  } else {
    points = expand_sweep(p.values, p.sweep, p.sweep_mode);
  }
  return points;
}

// Every point's input files (init.file, weights.file, mask.file) read and checked before
// anything is locked, created or computed: a bad weights.file under a sweep is one error
// (each distinct combination of files and shapes is read once; points already complete
// with this configuration are skipped unless --force).
void check_point_inputs(const std::vector<SweepPoint>& points, bool force) {
  std::set<std::string> checked;
  for (const SweepPoint& pt : points) {
    const Config& c = pt.config;
    if (!force && check_run_file(c.output.file, c.to_ini(), input_digests(c)).state == RunFileState::matches)
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

// What is on disk already for a run: the sweep index with its definition (and, outside a dry
// run, the sweep directory's lock) and each point's file against its configuration.
struct DiskState {
  std::string index_path, definition;
  std::optional<std::string> stored_definition;
  std::optional<ExclusiveLock> sweep_lock;
  std::vector<RunFileCheck> checks;
  bool definition_differs = false;
};

// Rank 0 looks and tells the others (one collective, which also guarantees that every rank has
// the same view before any rank writes a file).
void survey_outputs(DiskState& s, const std::vector<SweepPoint>& points, const ParsedArgs& p, bool dry_run, bool root) {
  const std::size_t n = points.size();
  if (!p.sweep.empty()) {
    s.index_path = sweep_index_path(std::filesystem::path(points.front().config.output.file).parent_path().string());
    s.definition = sweep_definition(points, p.sweep, p.sweep_mode);
    if (root && !dry_run) {  // one sweep per directory at a time: the second stops here
      const std::string dir = std::filesystem::path(s.index_path).parent_path().string();
      std::error_code ec;
      if (!dir.empty()) std::filesystem::create_directories(dir, ec);
      s.sweep_lock.emplace(lock_path_for(s.index_path), "sweep directory '" + (dir.empty() ? "." : dir) + "'");
      remove_stale_temporaries(s.index_path);
    }
    if (root) s.stored_definition = read_sweep_definition(s.index_path);
  }
  s.checks.assign(n, RunFileCheck{});
  if (root)
    for (std::size_t i = 0; i < n; ++i) {  // the identity: configuration and the inputs' content
      const Config& c = points[i].config;
      s.checks[i] = check_run_file(c.output.file, c.to_ini(), input_digests(c));
    }
  s.definition_differs = s.stored_definition && *s.stored_definition != s.definition;
  if (!dry_run) {
    std::vector<int> v;
    for (const RunFileCheck& ch : s.checks) v.push_back(static_cast<int>(ch.state));  // 0 on ranks > 0
    v.push_back(s.definition_differs ? 1 : 0);
    mpi::max_all(v);
    for (std::size_t i = 0; i < n; ++i) s.checks[i].state = static_cast<RunFileState>(v[i]);
    s.definition_differs = v[n] != 0;
  }
}

// `rcsim run --dry-run`: the resolved configuration and the planned outputs.
void print_dry_run(const std::vector<SweepPoint>& points, const ParsedArgs& p, const DiskState& s,
                   const std::vector<PointStatus>& status, bool force, std::ostream& out) {
  const std::size_t n = points.size();
  const bool is_sweep = !p.sweep.empty();
  out << points.front().config.to_ini_explained() << "\n";
  if (is_sweep) out << "# sweep (" << p.sweep_mode << "): " << n << " points; index " << s.index_path << "\n";
  int complete = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const RunFileCheck& ch = s.checks[i];
    std::string what = ch.state == RunFileState::matches   ? "complete"
                       : ch.state == RunFileState::differs ? "complete, DIFFERENT configuration (" + ch.difference + ")"
                                                           : "pending";
    if (ch.state == RunFileState::matches && force) what = "complete, recomputed (--force)";
    complete += status[i] == PointStatus::complete;
    out << "# " << (is_sweep ? "  " : "output: ") << points[i].config.output.file << "  [" << what
              << "]  memory: about " << format_bytes(run_memory_bytes(points[i].config)) << "\n";
  }
  out << "# this machine's memory: " << format_bytes(physical_memory_bytes()) << "\n";
  if (is_sweep) out << "# " << complete << " of " << n << " points complete, " << n - static_cast<std::size_t>(complete) << " to run\n";
  if (s.definition_differs)
    out << "# the index holds a different sweep definition (" << first_difference(*s.stored_definition, s.definition)
              << "): a run is refused without --force\n";
}

// Before any computing: never replace a foreign file or anything that is not a regular file;
// refuse a point that cannot fit in memory, and (without --force) outputs of another configuration.
void refuse_conflicts(const std::vector<SweepPoint>& points, const DiskState& s, bool is_sweep, bool force, bool root) {
  for (const SweepPoint& pt : points) {
    h5::check_replaceable(pt.config.output.file, "output.file", "rcsim-run", force);
    require_run_memory(pt.config);
  }
  if (is_sweep) {
    require_regular_or_absent(s.index_path, "");
    if (!force && path_exists(s.index_path) && !is_sweep_index(s.index_path))
      throw UsageError("sweep index '" + s.index_path +
                       "' exists and is not an rcsim sweep index; refusing to overwrite it (remove it, choose another "
                       "output.file, or rerun with --force)");
  }
  if (force) return;
  const std::string what = "details in rank 0's message";
  if (s.definition_differs)
    throw UsageError("sweep index '" + s.index_path + "' was written for a different sweep definition (" +
                     (root ? first_difference(*s.stored_definition, s.definition) : what) +
                     "); rerun with --force to recompute every point, or choose another output.file");
  for (std::size_t i = 0; i < points.size(); ++i)
    if (s.checks[i].state == RunFileState::differs)
      throw UsageError("'" + points[i].config.output.file + "' is complete but was made with a different configuration (" +
                       (root ? s.checks[i].difference : what) +
                       "); rerun with --force to overwrite it, or choose another output.file");
}

// The computing part of a run: this rank's pending points, the statuses and the sweep index.
struct RunState {
  const std::vector<SweepPoint>& points;
  const ParsedArgs& p;
  const DiskState& disk;
  std::vector<PointStatus> status;
  int rank = 0, ranks = 1;
  int exit_code = 0, interrupted = 0;
  bool is_sweep() const { return !p.sweep.empty(); }
  bool root() const { return rank == 0; }

  void write_index() {
    if (!is_sweep() || !root()) return;
    try {
      write_sweep_index(disk.index_path, disk.definition, p.sweep_mode, p.sweep, points, status);
    } catch (const std::exception& e) {  // the point files stay the authority; keep going (MPI: no hang)
      spdlog::error("cannot write the sweep index: {}", printable(e.what(), kMessageLimit));
      exit_code = std::max(exit_code, 1);
    }
  }
};

// This rank's points: the pending ones, balanced over the ranks by estimated cost.
std::vector<std::size_t> my_points(const RunState& r, std::size_t& pending) {
  std::vector<std::size_t> todo, mine;
  for (std::size_t i = 0; i < r.status.size(); ++i)
    if (r.status[i] == PointStatus::pending) todo.push_back(i);
  std::vector<double> costs;
  for (const std::size_t i : todo) costs.push_back(point_cost(r.points[i].config));
  const std::vector<int> owner = mpi::assign_balanced(costs, r.ranks);
  for (std::size_t k = 0; k < todo.size(); ++k)
    if (owner[k] == r.rank) mine.push_back(todo[k]);
  if (r.ranks > 1) spdlog::info("{} of {} pending points on this rank", mine.size(), todo.size());
  pending = todo.size();
  return mine;
}

// Compute the given points in turn; under a sweep (or MPI) a failed point does not stop the others.
void compute_points(RunState& r, const std::vector<std::size_t>& mine, const Provenance& prov,
                    const RunRequest& request) {
  const bool keep_going = r.is_sweep() || r.ranks > 1;
  long my_trials = 0;
  double my_work = 0;
  for (const std::size_t i : mine) {
    my_trials += r.points[i].config.run.trials;
    my_work += point_cost(r.points[i].config);
  }
  Progress progress(Progress::mode_for(request.quiet), my_trials, static_cast<int>(mine.size()), 10.0, my_work);
  if (request.progress) progress.set_observer(request.progress);
  const std::atomic<bool>* cancel = request.cancel;
  for (const std::size_t i : mine) {
    if (cancel && cancel->load()) {
      r.interrupted = 1;
      break;
    }
    const Config& c = r.points[i].config;
    progress.begin_point(r.points[i].name, c.run.trials, point_cost(c) / std::max(1, c.run.trials));
    const auto start = std::chrono::steady_clock::now();
    try {
      run_to_file(c, prov, cancel, &progress);
      progress.end_point();
      progress.clear();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      spdlog::info("wrote {} ({} trials, {} layers, {:.2f} s)", c.output.file, c.run.trials, c.model.layers, secs);
      r.status[i] = PointStatus::complete;
    } catch (const Interrupted&) {
      if (!keep_going) throw;
      r.interrupted = 1;
      break;
    } catch (const std::exception& e) {
      if (!keep_going) throw;
      progress.end_point();
      progress.clear();
      spdlog::error("point {} failed: {}", printable(r.points[i].name), printable(e.what(), kMessageLimit));
      r.status[i] = PointStatus::failed;
      r.exit_code = std::max(r.exit_code, dynamic_cast<const UsageError*>(&e) ? 2 : 1);
    }
    if (r.ranks == 1) r.write_index();  // atomically, after every point
  }
}

// Under MPI: rank 0 gathers the statuses, exit codes and interruptions and writes the index.
void gather_statuses(RunState& r) {
  const std::size_t n = r.status.size();
  std::vector<int> v;
  for (const PointStatus st : r.status) v.push_back(static_cast<int>(st));  // pending < complete < failed
  v.push_back(r.exit_code);
  v.push_back(r.interrupted);
  mpi::max_all(v);
  for (std::size_t i = 0; i < n; ++i) r.status[i] = static_cast<PointStatus>(v[i]);
  r.exit_code = v[n];
  r.interrupted = v[n + 1];
  r.write_index();
}

}  // namespace

RunOutcome run_points(const RunRequest& request, std::ostream& out) {
  const ParsedArgs& p = request.sources;
  const bool is_sweep = !p.sweep.empty();
  const std::vector<SweepPoint> points = plan_points(p);
  const std::size_t n = points.size();
  const int rank = mpi::rank(), ranks = mpi::size();
  const bool root = rank == 0;
  if (ranks > 1) spdlog::default_logger()->set_pattern("rcsim[" + std::to_string(rank) + "/" + std::to_string(ranks) + "]: %^%l%$: %v");
  check_point_inputs(points, request.force);

  RunOutcome outcome;
  outcome.points = n;
  if (request.dry_run && !root) return outcome;
  DiskState disk;
  survey_outputs(disk, points, p, request.dry_run, root);
  outcome.index_path = disk.index_path;
  std::vector<PointStatus> status(n, PointStatus::pending);
  for (std::size_t i = 0; i < n; ++i)
    if (disk.checks[i].state == RunFileState::matches && !request.force) status[i] = PointStatus::complete;
  if (request.dry_run) {
    print_dry_run(points, p, disk, status, request.force, out);
    return outcome;
  }
  refuse_conflicts(points, disk, is_sweep, request.force, root);

  RunState r{points, p, disk, std::move(status), rank, ranks};
  r.write_index();
  std::size_t pending = 0;
  const std::vector<std::size_t> mine = my_points(r, pending);
  Provenance prov;
  prov.command_line = request.command_line;
  compute_points(r, mine, prov, request);
  if (ranks > 1) gather_statuses(r);
  for (const PointStatus st : r.status) {
    outcome.failed += st == PointStatus::failed;
    outcome.complete += st == PointStatus::complete;
  }
  if (is_sweep && root)
    spdlog::info("sweep: {} of {} points complete ({} computed now, {} failed); index {}", outcome.complete, n,
                 outcome.complete - (n - pending), outcome.failed, disk.index_path);
  if (r.interrupted) throw Interrupted();
  outcome.exit_code = r.exit_code;
  return outcome;
}

}  // namespace rcsim
