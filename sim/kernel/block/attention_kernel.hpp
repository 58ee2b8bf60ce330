// The seam between a layer and the platforms (docs/dev/platforms.md): a platform's attention of all
// heads of a layer without the N x N matrix, Y = sum_h A_h V_h (Y resized to N x d and
// overwritten), returning the attention statistics (with `statistics` also those of
// attention_statistics.hpp). The platforms (kernel/platform/) define the kernels; the trial puts
// the run's kernel in LayerParams::kernel; the layer calls it where kernel_applies, else runs the
// reference heads (layer.cpp). The layer never names a platform.
#pragma once

#include "kernel/ops/attention.hpp"
#include "kernel/model/weights.hpp"
#include "kernel/support/types.hpp"

namespace rcsim {

struct LayerParams;

struct AttentionKernel {
  const char* platform;  // run.platform's value
  AttentionStats (*attention)(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, double d_qk,
                              const MaskRows& rows, int threads, bool statistics, Matrix& Y);
  AttentionStats (*attention_float)(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, double d_qk,
                                    const MaskRows& rows, int threads, bool statistics, MatrixF& Y);
  bool statistics;  // computes the attention statistics of attention_statistics.hpp
};

// Whether a platform kernel computes layer `p`'s attention: softmax attention on a mask whose rows
// are one range each, without projection biases, logit biases, QK-normalisation, shaped attention,
// attention dropout, a kept attention matrix or the unit-speed step (those need the matrix: the
// reference heads run them), and the statistics only where the kernel has them.
bool kernel_applies(const AttentionKernel& k, const LayerParams& p, bool projection_biases, const MaskRows& rows);

}  // namespace rcsim
