// A pretrained (or random-weight) Llama stack run over token sequences as rcsim's X(0) -> X(t):
// X(0) = the embedding rows of the ids, X(t) the residual stream after block t, each measured with
// rcsim's per-layer token measures (kernel/measures/metrics.hpp: mu, singular values, rank, cos_abs_mean,
// ...) and written as a run file (io/run_file.hpp: /metrics, /summary, /diagnostics), one trial
// per sequence. The /config text is the nearest rcsim run configuration (model.tokens = sequence
// length, model.dim = d, model.layers = blocks applied, model.heads = H, mask.type = causal)
// followed by a [pretrained] section naming the checkpoint, its SHA-256 and the options: `rcsim
// run` refuses that section, since random weights would not reproduce the run. The core
// attention measures are not computed for this stack and stay NaN. /token_ids [trial, token]
// holds the ids.
#pragma once

#include <string>
#include <vector>

#include "io/output_file.hpp"
#include "io/run_file.hpp"
#include "kernel/llama/llama_forward.hpp"

namespace rcsim {

struct LlamaRunRequest {
  std::vector<std::vector<int>> sequences;  // each of the same length N >= 1 (a trial each)
  llama::ForwardOptions forward;
  bool single = false;                      // float32 arithmetic
  std::string checkpoint, checkpoint_sha256;  // for /config and input_sha256
  std::string weights = "pretrained";       // or "random (seed K)"
  std::string output;                       // the run file
};

// Compute and write into `file` (q.output's OutputFile, taken by the caller before any computing
// and checked under the --force rule: refuse_existing_output, io/output_file.hpp), then publish it.
// Returns the path written.
std::string write_llama_run(const llama::LlamaModel& m, const LlamaRunRequest& q, const Provenance& p, OutputFile& file);

// Token id sequences from text: one sequence per line, ids separated by spaces or commas, '#'
// starts a comment, blank lines skipped. `where` names the source in UsageErrors.
std::vector<std::vector<int>> parse_id_sequences(const std::string& text, const std::string& where);

}  // namespace rcsim
