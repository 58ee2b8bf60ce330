// Everything the engine needs before the first trial: the configuration, the mask and its graph,
// the input arrays, and what is resolved once per run (the blocks' settings per layer range, the
// platform, the threads inside a trial, whether the blocks keep their attention matrices).
#pragma once

#include "kernel/block/block.hpp"
#include "kernel/model/mask.hpp"
#include "kernel/model/mask_ranges.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/support/types.hpp"
#include "kernel/model/weights.hpp"

namespace rcsim {

struct EngineSetup {
  ModelSpec config;
  MaskMatrix mask;  // dense N x N where the run needs it (needs_dense_mask, platform_table.hpp), else 0 x 0
  MaskRows rows;    // the mask's row ranges (one per row for the built-in masks), read by the attention
  MaskGraph graph;
  InputArrays files;
  // model.layer_overrides: one BlockParams per layer range (kernel/block/block.hpp, layer_settings),
  // built once here and shared by every trial (BlockParams::per_layer points to it); empty without.
  LayerSettings per_layer;
  int max_rank = 0;        // largest rank the layers 1..L allow
  int max_rank_input = 0;  // min(N, d), for layer 0
  // run.platform resolved (kernel/trial/platform_table.hpp; never `automatic` here) and the threads one trial
  // uses on it (threads_per_trial).
  Platform platform = Platform::reference;
  int trial_threads = 1;
  // The blocks keep their head-averaged attention: output.attention, or an attention measure asks.
  bool keep_attention = false;
  // The blocks report the attention statistics (attention_statistics.hpp): an attention_rows measure asks.
  bool attention_statistics = false;
  // Blocks per segment of the gradient measures' reverse pass (kernel/block/gradients.hpp); 0: the
  // automatic gradient_segment_length. Every value gives the same results (tests set it).
  int gradient_segment = 0;
  // Recorded layers whose Jacobian rows jacobian_log_spec2 keeps at a time (one set of N reverse
  // passes per chunk); 0: the automatic jacobian_chunk_layers. Every value gives the same results.
  int jacobian_chunk = 0;
  // The reference platform's heads on the general path on every mask (LayerParams::general_path):
  // the truth that the platform conformance test holds every platform entry against, the reference
  // platform's own fast path included (tests set it; runs never do).
  bool general_path = false;
};

// Everything the engine needs before the first trial, from the model, its mask (built from
// mask.type, or `custom` for mask.type = custom) and its input arrays (the weight source:
// io/inputs.hpp reads them from files), checked (UsageError for bad shapes or values).
// io/inputs.hpp's prepare(c) reads the files and calls this; Python (prepare_host) and the
// browser page (web/engine.cpp, no input arrays) call it too.
EngineSetup prepare(const ModelSpec& c, const MaskMatrix* custom, InputArrays inputs);

}  // namespace rcsim
