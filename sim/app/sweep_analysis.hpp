// `rcsim analyze DIR`: one table for a whole sweep, a row per analysed point: its swept
// parameters, the decay rates and fit quality of mu and rank_one_residual, the collapse depth
// and the theory bound. Written next to the sweep's index as DIR/analysis.csv and DIR/analysis.h5
// (docs/user/analysis.md, "Sweeps").
#pragma once

#include <string>
#include <vector>

#include "io/sweep_index.hpp"
#include "app/analysis.hpp"

namespace rcsim {

struct SweepAnalysisRow {
  int point = 0;                    // the point's index in the sweep
  const SweepIndexPoint* entry = nullptr;
  RunAnalysis analysis;
};

// The table's columns, in order (the swept keys first, after point, name and file).
std::vector<std::string> sweep_table_columns(const SweepIndex& index);

// The printed table: one line per analysed point.
std::string sweep_summary_table(const SweepIndex& index, const std::vector<SweepAnalysisRow>& rows,
                                const AnalysisOptions& o);

// Write DIR/analysis.csv and DIR/analysis.h5 for the analysed (complete) points, each atomically
// (an exclusive temporary beside it, renamed when complete). Returns the two paths.
std::vector<std::string> write_sweep_table(const SweepIndex& index, const std::vector<SweepAnalysisRow>& rows,
                                           const AnalysisOptions& o);

}  // namespace rcsim
