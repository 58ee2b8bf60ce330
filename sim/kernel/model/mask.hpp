// Attention masks (SCIENCE.md section 2) and their graph analysis.
// mask(i, j) = 1 iff token i may attend to token j. Information flows j -> i along such an edge.
#pragma once

#include <vector>

#include "kernel/model/model_spec.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

MaskMatrix complete_mask(int n);
MaskMatrix causal_mask(int n);                                 // j <= i
MaskMatrix sliding_window_mask(int n, int w);                  // |i - j| <= w
MaskMatrix unidirectional_sliding_window_mask(int n, int w);  // i - w <= j <= i

// The mask a configuration asks for; for mask.type = custom, `custom` (read from mask.file by the
// io layer, io/inputs.hpp), checked. Throws UsageError for a custom mask of the wrong shape or
// without self-loops, or for custom without one.
MaskMatrix make_mask(const ModelSpec& c, const MaskMatrix* custom = nullptr);

// Rejects a mask that is not square or lacks a self-loop, naming `what` in the message.
void check_mask(const MaskMatrix& m, const std::string& what);

struct MaskGraph {
  bool quasi_strongly_connected = false;  // some node reaches every node along j -> i edges
  std::vector<int> centres;               // the nodes that reach every node
  int radius = -1;                        // min over centres of max BFS distance; -1 if none
  int searches = 0;                       // breadth-first searches run (a cost diagnostic)
};

// Centres and radius along the information-flow edges j -> i, in O(N^2) per breadth-first
// search: one depth-first pass and two searches find the centres, and eccentricity bounds
// (Takes and Kosters) prune the searches for the radius to a few for the built-in masks
// (a custom mask may need more; at most two per centre).
MaskGraph analyse_mask(const MaskMatrix& m);

// The radius formula of SCIENCE.md's table, for checking the BFS (-1 for custom masks).
int radius_formula(MaskType type, int n, int w);

}  // namespace rcsim
