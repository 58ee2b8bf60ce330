// The opencl platform's entry of the seam (attention_kernel.hpp), in every build: it calls
// opencl_attention, which platform_opencl.cpp defines where OpenCL is built and
// platform_opencl_absent.cpp (refusing) where it is not.
#include "kernel/platform/platform_opencl.hpp"

namespace rcsim {

const AttentionKernel& opencl_attention_kernel() {
  static const AttentionKernel kernel{
      "opencl",
      [](const Eigen::Ref<const Matrix>& X, const LayerWeights& w, double d_qk, const MaskRows& rows, int, bool,
         Matrix& Y) { return opencl_attention(X, w, d_qk, rows, Y); },
      [](const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, double d_qk, const MaskRows& rows, int,
         bool, MatrixF& Y) { return opencl_attention(X, w, d_qk, rows, Y); },
      false};
  return kernel;
}

}  // namespace rcsim
