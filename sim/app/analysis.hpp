// `rcsim analyze`: collapse rates, collapse depth and the theory overlay of a run file
// (docs/user/analysis.md). The layer coordinate is always read from the file's /layer dataset (a run
// may record measures at some layers only), never assumed to be 0..L.
#pragma once

#include <string>
#include <vector>

#include "app/plateau_analysis.hpp"
#include "kernel/measures/decay_fit.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

struct AnalysisOptions {
  double threshold = 1e-3;  // collapse depth: first layer with mu_rel < threshold
  // The fit window of every curve: auto = exponential_window() (the longest straight stretch of
  // ln y before the floor; default_window() when there is none), fixed = default_window() (skip
  // the first 10%, stop before the floor), layers = the user's [from, to].
  enum class Window { automatic, fixed, layers } window = Window::automatic;
  double from = 0.0, to = 0.0;  // window = layers: in layers (inclusive)
  PlateauOptions plateaus;      // --plateaus=MEASURE (app/plateau_analysis.hpp)
};

// Throws UsageError unless 0 < threshold < 1 and, for a user window, from < to.
void validate(const AnalysisOptions& o);

// Decay of one measure (mu or rank_one_residual): per trial and for the ensemble.
struct CurveRates {
  std::string measure;
  std::vector<LogLinearFit> trial;   // per trial (slope NaN when the window has < 3 points)
  std::vector<double> median_curve;  // per recorded layer: median over trials (NaN ignored)
  std::vector<FitQuality> trial_quality;  // per trial: R^2 and the halves' rates of its window
  std::vector<char> trial_phase_found;    // per trial, auto window: 1 if an exponential phase was found
  LogLinearFit ensemble;             // fit of the median curve, same window rule
  FitQuality ensemble_quality;
  bool ensemble_phase_found = false;  // auto window: an exponential phase of the median curve was found
  int ensemble_last_usable = -1;      // last_usable_index of the median curve (before 0, the floor, NaN)
  int poor_fits = 0;                  // fitted trials whose fit is poor (FitQuality::poor)
  // Decay rates (= -slope, per layer, natural log) across the trials that could be fitted.
  int fitted = 0;
  double mean = 0, std = 0, sem = 0, median = 0, q10 = 0, q90 = 0;
};

struct RunAnalysis {
  std::string path, mask_type, norm_type;
  int tokens = 0, dim = 0, trials = 0;
  std::vector<double> layer;  // the /layer coordinate of the run file
  CurveRates mu, rank_one_residual;
  std::vector<double> collapse_depth;  // per trial, -1 = never
  double collapse_depth_median = 0;    // over the trials that collapsed (NaN if none)
  double collapsed_fraction = 0;
  // Theory overlay (docs/science/model-spec.md 5.1).
  int radius = -1;                // /mask attribute radius (-1: not quasi-strongly connected)
  double eps = 0;                 // smallest finite attn_min over every trial and layer
  std::vector<double> eps_trial;  // the same per trial
  double bound_rate = 0;          // -ln(1 - eps^r) / r
  std::vector<double> C;          // per trial: mu at the first recorded layer
  double rate_ratio = 0;          // ensemble decay rate of mu / bound_rate
  double log10_bound_rate = 0;    // log10 of bound_rate, finite where the rate underflows
  double log10_rate_ratio = 0;    // log10 of rate_ratio, from the log10 rates
  PlateauAnalysis plateaus;  // --plateaus: the plateaus of the chosen measure (none: !enabled())
};

// Read and analyse a run file. UsageError: missing file, not an rcsim run file, incomplete.
RunAnalysis analyze_run(const std::string& path, const AnalysisOptions& o);

// Write /analysis into the run file atomically: the file is copied to PATH.analysis.tmp, the
// group (re)written there, and the copy renamed over PATH.
void write_analysis(const RunAnalysis& a, const AnalysisOptions& o);

// Warnings about the fits of a run (no exponential phase, poor ensemble fit, poor trial fits):
// one line per doubtful measure with its reasons, for the log; empty when every fit is good.
std::vector<std::string> fit_warnings(const RunAnalysis& a, const AnalysisOptions& o);

// The printed table.
std::string analysis_table(const RunAnalysis& a, const AnalysisOptions& o);

// Text of the window rule (stored as an attribute and printed).
std::string window_rule(const AnalysisOptions& o);

}  // namespace rcsim
