// The opencl platform in a build without OpenCL (CMake did not find it): run.platform = opencl is
// refused by resolved_platform (platform.cpp) with opencl_platform_built() false; these say why
// if called anyway.
#include "kernel/support/errors.hpp"
#include "kernel/platform/platform_opencl.hpp"

namespace rcsim {

namespace {
RuntimeError not_built() {
  return RuntimeError(
      "run.platform = opencl: this build has no OpenCL (CMake did not find the OpenCL loader and headers: Debian "
      "opencl-headers, opencl-clhpp-headers, ocl-icd-opencl-dev; rebuild after installing them)");
}
}  // namespace

bool opencl_platform_built() { return false; }
std::vector<std::string> opencl_devices() { return {}; }
std::string opencl_device() { throw not_built(); }
OpenclDeviceInfo opencl_device_info() { throw not_built(); }
int opencl_batch_size() { return 1; }
OpenclBatchMember::OpenclBatchMember(OpenclBatch& batch) : batch_(batch), previous_(nullptr) {}
OpenclBatchMember::~OpenclBatchMember() = default;
AttentionStats opencl_attention(const Eigen::Ref<const Matrix>&, const LayerWeights&, double, const MaskRows&,
                                Matrix&) {
  throw not_built();
}
AttentionStats opencl_attention(const Eigen::Ref<const MatrixF>&, const LayerWeightsT<float>&, double,
                                const MaskRows&, MatrixF&) {
  throw not_built();
}

}  // namespace rcsim
