// One self-attention layer t -> t+1 (SCIENCE.md section 1):
//   A_h = masked softmax((X W_Q,h)(X W_K,h)^T / sqrt(d_QK)),  Y = sum_h A_h X W_V,h
//   (Y = sum_h A_h X W_V,h W_O,h with an output projection, model.value_dim > 0),
//   (attention.bias: Q, K and X W_V,h plus 1 b^T per head, then Y + 1 b_O^T after the sum),
//   Y <- X + alpha Y (if alpha != 0),  X(t+1) = normalise rows of Y.
#pragma once

#include "kernel/model/block_settings.hpp"
#include "kernel/model/model_spec.hpp"
#include "kernel/ops/attention.hpp"
#include "kernel/block/attention_kernel.hpp"
#include "kernel/ops/dropout.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/ops/normalization.hpp"
#include "kernel/ops/cache.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

// The parameters of `c`'s layer for this mask and normalisation (which must outlive them).
LayerParams layer_params(const ModelSpec& c, const MaskMatrix* mask, const Normalization* norm);

// Shaped attention (docs/science/gradients.md): A <- a A + b I - c C on the allowed entries, C the
// uniform attention over the mask (row i: 1/|N_i| on N_i), b on the diagonal (every row has its
// self-loop). Entries the mask forbids stay exactly 0. Used by attention_layer and the backward pass.
void shape_attention(Eigen::Ref<Matrix> A, const MaskMatrix& mask, const AttentionShape& s);
void shape_attention(Eigen::Ref<MatrixF> A, const MaskMatrix& mask, const AttentionShape& s);  // float32

// Additive logit bias (docs/science/gradients.md): S <- S + B_h for head h of H (0-based h; ALiBi's
// slope of head h is 2^(-8(h+1)/H)), B_ij = -m_h |i - j| (alibi) or |i - j| log gamma (decay).
// Every entry is biased; the mask then sets the forbidden ones to exactly 0 after the softmax.
void add_logit_bias(Eigen::Ref<Matrix> S, const LogitBias& b, std::size_t h, std::size_t H);
void add_logit_bias(Eigen::Ref<MatrixF> S, const LogitBias& b, std::size_t h, std::size_t H);  // float32
// The same for layer weights `w`: attention.logit_bias = file adds w.logit_bias[h] (the layer's B_h
// from weights.file), the other kinds as above.
void add_logit_bias(Eigen::Ref<Matrix> S, const LogitBias& b, const LayerWeights& w, std::size_t h);
void add_logit_bias(Eigen::Ref<MatrixF> S, const LogitBias& b, const LayerWeightsT<float>& w, std::size_t h);
double logit_bias_slope(const LogitBias& b, std::size_t h, std::size_t H);  // m_h (alibi), -log gamma (decay)

// What a layer reports besides its output.
struct LayerReport {
  AttentionStats attention;   // min weight over heads, mean entropy averaged over heads
  int degenerate_rows = 0;    // rows without direction in the normalisation
  // dynamics.integrator = rk4: dt L, L the field's Lipschitz constant estimated between the step's last
  // two stage points (kernel/block/layer.cpp, rk4_impl); RK4 is stable on the real axis for dt L <= 2.785.
  double rk4_stiffness = 0.0;
};
// RK4's stability interval on the negative real axis: |R(z)| <= 1 for z in [-2.785, 0], R(z) = 1 + z +
// z^2/2 + z^3/6 + z^4/24 (its real root of |R| = 1 at z = -2.7853).
inline constexpr double kRk4StabilityLimit = 2.785;

// Preallocated work matrices: a layer allocates nothing once they have their sizes.
// The mask's row structure is analysed (or copied) on the first call and cached for the same mask object.
// (Allocation speed: see keep_freed_memory below.)
// T is the scalar type of the arithmetic (double; float for run.precision = float32).
template <class T>
struct LayerWorkspaceT {
  MatrixT<T> Q, K, S, XV, Y;   // the general path (masks whose rows are not one range)
  MatrixT<T> XVO;              // X W_V,h W_O,h (model.value_dim > 0)
  RowMajorMatrixT<T> S_rows;   // the fast path: logits, then attention, row by row
  LogitsWorkspaceT<T> logits;
  RowVectorT<T> buffer;
  const void* analysed = nullptr;  // the LayerParams::rows (else ::mask) that `rows` was taken from
  MaskRows rows;
  Matrix attention_mean;       // (1/H) sum_h A_h (in double), when LayerParams::keep_attention
  MatrixT<T> k1, k2, k3, k4, Z;  // the RK4 stages and stage point (LayerParams::rk4)
  LayerWorkspaceT(int n, int d, int dk);
};
using LayerWorkspace = LayerWorkspaceT<double>;

// Asks glibc (where it is the C library) to keep freed memory below 64 MB in the heap (mallopt):
// otherwise every trial's work matrices (N x N, over glibc's 128 kB thresholds) are returned to
// the system when freed and faulted back in by the next trial. Process-wide, so the kernel never
// calls it: main() of rcsim and of the benchmark do, a host program (Python) may.
void keep_freed_memory();

// Fixes the cache sizes Eigen blocks its matrix products for (L1 48 KiB, L2 1.25 MiB, L3 32 MiB)
// instead of the sizes the CPU reports. The blocking decides the order of the summations in a
// product longer than one block (d = 768 at GPT-2 size), so without this the same build gives
// other last bits on a CPU with other cache sizes: an AMD EPYC reporting 32 KiB / 512 KiB made
// 344 of the portable golden set's 64,543 digests differ from the Intel machine (48 KiB / 1.25 MiB)
// that recorded it. Process-wide (Eigen's setting), so the kernel never calls it: main() of rcsim,
// of the benchmark and of the test programs do, and rcsim's Python module when it is imported.
void fix_product_blocking();

// X_next = layer(X). X_next must not alias X. With p.dropout, each head's attention weights are
// dropped after the softmax (the attention statistics describe them before dropout) and the sum
// over heads before the residual. Masks whose rows are one contiguous range each (all
// but some custom masks) take the fast path: attention_logits_fast (folded W_Q W_K^T when cheaper,
// lower triangle only for causal masks), softmax_rows, and a triangular product A (X W_V) for
// causal masks; other masks the general path (attention_logits, masked_softmax, attention_stats).
// With a cache (the derivative passes, kernel/ops/cache.hpp) the layer takes the general path and
// keeps its activations there.
LayerReport attention_layer(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, const LayerParams& p,
                            LayerWorkspace& ws, Matrix& X_next, LayerCacheT<double>* cache = nullptr);
// The same layer in float arithmetic (run.precision = float32): one template, layer.cpp.
LayerReport attention_layer(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, const LayerParams& p,
                            LayerWorkspaceT<float>& ws, MatrixF& X_next, LayerCacheT<float>* cache = nullptr);

}  // namespace rcsim
