#include "cli/commands.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>

#include "app/analysis.hpp"
#include "app/sweep_analysis.hpp"
#include "config/key_sources.hpp"
#include "io/hdf5_file.hpp"
#include "io/isolated.hpp"
#include "io/sweep_index.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim {

namespace {

const char* kAnalyzeUsage = R"(usage: rcsim analyze RUN.h5|SWEEP_DIR [...] [--threshold=X] [--window=auto|fixed|FROM:TO]
                     [--plateaus=MEASURE [--plateau-rtol=X] [--plateau-min-duration=X]]
                     [--no-write] [--config FILE]

  Decay rates of mu and rank_one_residual (per trial and ensemble), collapse depth (first layer
  with mu_rel < --threshold) and the theory bound C (1 - eps^r)^(t/r). Prints a table and writes
  /analysis into each run file (atomically). A sweep directory analyses each complete point of
  its index and writes one table, a row per point, next to the index: DIR/analysis.csv and
  DIR/analysis.h5. Among run files (a glob like data/depth/*.h5) the sweep's index.h5 and
  analysis.h5 are skipped. Warns when a fit is poor (docs/user/analysis.md). --plateaus=MEASURE
  adds the plateaus and merge times of that measure's series per trial (against /time in a
  particle-flow run), as analysis/metastability.py: printed and written to /analysis/plateaus.

options (also as `name = value` lines of an INI file given with --config FILE):
)";

}  // namespace

// The options of rcsim analyze, declared once: parsed by parse_command_options, listed by --help.
std::vector<KeyDecl> analyze_options() {
  KeyDecl threshold{"threshold", number_text(AnalysisOptions{}.threshold), "collapse threshold on mu_rel, in (0, 1)"};
  KeyDecl window{"window", "auto",
                 "auto: fit the exponential phase, the straight stretch of ln y that covers the most decay, "
                 "before the round-off floor; fixed: skip the first 10% of the usable depth, stop before the "
                 "floor; FROM:TO: fit the recorded layers FROM..TO"};
  window.allowed_text = "auto|fixed|FROM:TO";
  KeyDecl no_write{"no-write", "false", "only print"};
  no_write.kind = KeyKind::boolean;
  no_write.flag = true;
  KeyDecl plateaus{"plateaus", "none",
                   "the measure whose plateaus and merge times to find, per trial (e.g. energy, mu, clusters_999); "
                   "none: no plateau detection"};
  plateaus.allowed_text = "none|MEASURE (a series [trial, layer] of /metrics)";
  KeyDecl rtol{"plateau-rtol", number_text(PlateauOptions{}.rtol),
               "plateau tolerance, a fraction of the series' range (0 for integer series such as cluster counts)"};
  rtol.allowed_text = "X >= 0";
  KeyDecl min_duration{"plateau-min-duration", "auto",
                       "shortest plateau, and the window of its flatness test, in units of its axis (/time, else the "
                       "layer); auto: 2% of the axis' span"};
  min_duration.allowed_text = "auto|X >= 0";
  return {threshold, window, plateaus, rtol, min_duration, no_write};
}

namespace {

// The analysis options from the options' text.
AnalysisOptions analysis_options(const KeyValues& v) {
  AnalysisOptions o;
  o.threshold = parse_number("--threshold", v.at("threshold"));
  const std::string w = v.at("window");
  const auto colon = w.find(':');
  if (w == "auto" || w == "fixed") {
    o.window = w == "auto" ? AnalysisOptions::Window::automatic : AnalysisOptions::Window::fixed;
  } else {
    if (colon == std::string::npos) throw UsageError("--window=" + w + ": expected auto, fixed or FROM:TO (layers)");
    o.window = AnalysisOptions::Window::layers;
    o.from = parse_number("--window", w.substr(0, colon));
    o.to = parse_number("--window", w.substr(colon + 1));
  }
  o.plateaus.measure = v.at("plateaus");
  o.plateaus.rtol = parse_number("--plateau-rtol", v.at("plateau-rtol"));
  const std::string min_duration = v.at("plateau-min-duration");
  if (min_duration != "auto") {
    try {
      o.plateaus.min_duration = parse_number("--plateau-min-duration", min_duration);
    } catch (const UsageError&) {
      throw UsageError("--plateau-min-duration=" + printable(min_duration) + ": expected auto or a finite number >= 0");
    }
  }
  validate(o);
  return o;
}

// A sweep directory to analyse (its index lists the points) or a run file; an index or a sweep
// table met among run files (a glob like data/depth/*.h5) is skipped.
struct AnalyzeInputs {
  std::vector<SweepIndex> sweeps;
  std::vector<std::string> runs;
};

AnalyzeInputs classify_paths(const std::vector<std::string>& files, const AnalysisOptions& o) {
  AnalyzeInputs in;
  std::vector<SweepIndex>& sweeps = in.sweeps;
  std::vector<std::string>& runs = in.runs;
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
  return in;
}

}  // namespace

int cmd_analyze(const Invocation& inv) {
  std::vector<std::string> files;
  const KeyValues v = parse_command_options("analyze", analyze_options(), inv.keys, inv.config_file, &files);
  const AnalysisOptions o = analysis_options(v);
  const bool write = !parse_bool_value("no-write", v.at("no-write"));
  if (files.empty()) throw UsageError("analyze: no run file given (usage: rcsim analyze RUN.h5|SWEEP_DIR [...])");
  const AnalyzeInputs in = classify_paths(files, o);
  const std::vector<SweepIndex>& sweeps = in.sweeps;
  const std::vector<std::string>& runs = in.runs;
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


std::string analyze_help() { return kAnalyzeUsage + options_help(analyze_options()); }

}  // namespace rcsim
