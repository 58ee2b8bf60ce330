// One self-attention layer t -> t+1 (SCIENCE.md section 1):
//   A_h = masked softmax((X W_Q,h)(X W_K,h)^T / sqrt(d_QK)),  Y = sum_h A_h X W_V,h,
//   Y <- X + alpha Y (if alpha != 0),  X(t+1) = normalise rows of Y.
#pragma once

#include "attention.hpp"
#include "inputs.hpp"
#include "normalization.hpp"
#include "types.hpp"

namespace rcsim {

struct LayerParams {
  const MaskMatrix* mask = nullptr;
  double d_qk = 1.0;
  double alpha = 0.0;  // residual weight; 0 = none
  const Normalization* norm = nullptr;
};

// What a layer reports besides its output.
struct LayerReport {
  AttentionStats attention;   // min weight over heads, mean entropy averaged over heads
  int degenerate_rows = 0;    // rows without direction in the normalisation
};

// Preallocated work matrices: a layer allocates nothing once they have their sizes.
struct LayerWorkspace {
  Matrix Q, K, S, XV, Y;
  LayerWorkspace(int n, int d, int dk) : Q(n, dk), K(n, dk), S(n, n), XV(n, d), Y(n, d) {}
};

// X_next = layer(X). X_next must not alias X.
LayerReport attention_layer(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, const LayerParams& p,
                            LayerWorkspace& ws, Matrix& X_next);

}  // namespace rcsim
