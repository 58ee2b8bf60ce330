// `rcsim analyze --plateaus=MEASURE`: the plateaus and merge times of one measure's series in a run
// file, per trial (docs/user/analysis.md, "Plateaus"), against /time for a particle-flow run and
// /layer (or /attention_layer) otherwise: the definition of analysis/metastability.py
// (kernel/measures/plateaus.hpp), written to /analysis/plateaus and printed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"
#include "kernel/measures/plateaus.hpp"

namespace rcsim {

struct PlateauOptions {
  std::string measure = "none";  // a /metrics series [trial, layer]; "none": no plateau detection
  double rtol = 2e-3;            // tolerance, a fraction of the series' range (0 for integer series)
  std::optional<double> min_duration;  // shortest plateau, in units of the axis; none: auto,
                                       // kMinDurationFraction x the axis' span (plateaus.hpp)
  bool enabled() const { return measure != "none"; }
};

// Throws UsageError unless rtol and min_duration (where given) are finite and >= 0.
void validate(const PlateauOptions& o);

struct TrialPlateaus {
  std::size_t finite_samples = 0;  // the series up to its first non-finite value (all, normally)
  std::vector<Plateau> plateaus;
  std::vector<double> merges;      // merge times between consecutive plateaus
};

struct PlateauAnalysis {
  std::string measure;       // empty: none asked for
  std::string axis;          // "time", "layer" or "attention_layer": the file's coordinate used as t
  PlateauOptions options;
  double min_duration = 0;   // the one used: options.min_duration, or auto on the axis
  std::vector<double> t;     // that coordinate
  std::vector<TrialPlateaus> trial;
  std::vector<std::string> warnings;  // series cut at a non-finite value, one line per trial
  bool enabled() const { return !measure.empty(); }
};

// The plateaus of /metrics/<o.measure> of every trial of the open run file `f` (named `path` in
// messages). UsageError: the measure is not a series [trials, len(/layer) or len(/attention_layer)]
// of the file (the message lists those it has).
PlateauAnalysis analyze_plateaus(const h5::File& f, const std::string& path, const PlateauOptions& o);

// /analysis/plateaus: attributes measure, axis, rtol, min_duration, definition; per plateau (axis
// `plateau`) plateau_trial, start, end, value, first_sample, last_sample; per merge (axis `merge`)
// merge_trial, merge_time; per trial finite_samples, plateau_count.
void write_plateaus(const h5::Group& analysis, const PlateauAnalysis& p);

// The printed table: one row per plateau, then the merge times of each trial.
std::string plateau_table(const PlateauAnalysis& p);

}  // namespace rcsim
