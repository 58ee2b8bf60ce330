// The opencl platform's attention (run.platform = opencl; docs/dev/platforms.md): the operation of
// fused_attention.hpp, Y = sum_h softmax_rows(Q_h K_h^T) V_h on a mask whose rows are one range
// each, with q_i = x_i W_Q,h / sqrt(d_QK), k_j = x_j W_K,h, v_j = x_j W_V,h (W_O,h), run on an
// OpenCL device. The host computes Q, K and V of each head (O(N d^2)) and the sum over heads; the
// device computes every row's online softmax over its range and the weighted sum of values
// (O(N^2 d), the hot loop: platform_opencl.cl), one work item per row, keys in tiles shared by
// a work-group. Each row is summed by one work item in VW lanes (8 on a CPU device, 1 on a GPU;
// RCSIM_OPENCL_LANES = 1 or 8 overrides), and the statistics are reduced on the host in row order:
// the result is independent of the work-group layout and the device's scheduling.
//
// The statistics are the reference's (attention.hpp): per row the smallest weight
// exp(min_j s_ij - m_i) / l_i and the entropy sum_j a_ij (m_i - s_ij) + log1p(rest_i), with
// rest_i = l_i - 1 kept apart from the maximum's own term (as softmax_rows does); min over rows
// and heads, the entropy averaged over rows, then over heads.
//
// Built where CMake finds OpenCL (platform_opencl.cpp); otherwise platform_opencl_absent.cpp,
// whose functions say that the build has no OpenCL. The device: the first GPU of the first
// platform that has one, else the first device; RCSIM_OPENCL_DEVICE = k picks the k-th device
// (0-based) of the list that opencl_devices() returns. The context, queue and the compiled
// programs are built once per process and shared by every trial (calls are serialised).
//
// Two kernels compute the same rows: `rows` (one work item per row, keys in VW lanes; the default
// on CPU devices) and `split` (one work-group per row, its keys dealt among the work items, each
// keeping an online-softmax partial that a fixed-order tree in local memory merges; the default
// on GPUs, where one item per row leaves most of the device idle). RCSIM_OPENCL_KERNEL = rows or
// split overrides the choice (the tests run both on pocl).
//
// Batches (OpenclBatch): threads that join one batch have their calls launched together, every
// (call, head) one slice of ONE kernel enqueue, once every member still in the batch has a call
// waiting (or has left). Each row is computed by the same code whatever the batch holds, so a call
// returns bitwise what it returns alone. TrialBatch (kernel/trial/trial_batch.hpp) drives it, and
// the run drives its trials through TrialBatch (kernel/trial/simulation.hpp).
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "kernel/ops/attention.hpp"
#include "kernel/block/attention_kernel.hpp"
#include "kernel/support/types.hpp"
#include "kernel/model/weights.hpp"

namespace rcsim {

// Whether this build has the opencl platform (CMake found the OpenCL loader and headers).
bool opencl_platform_built();

// Every OpenCL device the loader sees, one line each: "k: DEVICE (PLATFORM; TYPE; OpenCL C x.y;
// float64 yes|no)", in the order RCSIM_OPENCL_DEVICE counts. Empty without OpenCL.
std::vector<std::string> opencl_devices();

// The device the opencl platform runs on, as a line of opencl_devices() (this initialises the
// platform). RuntimeError if there is none or RCSIM_OPENCL_DEVICE names none.
std::string opencl_device();

// What a run file records of the device that ran (root attributes opencl_*: docs/reference/file-formats.md).
struct OpenclDeviceInfo {
  std::string name, vendor, driver_version, kernel;  // kernel: "rows" or "split" (as the next call chooses)
  int compute_units = 0;
};
// The device the opencl platform runs on (initialises it); RuntimeError as opencl_device().
OpenclDeviceInfo opencl_device_info();

// Trials in flight on the opencl platform: RCSIM_OPENCL_BATCH (1 to 4096; UsageError naming it
// otherwise), default 256 — their attention calls form one batch.
int opencl_batch_size();

struct OpenclCall;  // a call waiting in a batch (platform_opencl_batch.cpp)

// A batch of threads whose attention calls are launched together (see above). Members join by an
// OpenclBatchMember on their own thread; a thread in no batch launches its calls alone.
class OpenclBatch {
 public:
  OpenclBatch() = default;
  OpenclBatch(const OpenclBatch&) = delete;
  OpenclBatch& operator=(const OpenclBatch&) = delete;
  int launches() const { return launches_; }  // kernel enqueues so far (the tests count them)
  // `k` members about to join (threads being started): rounds wait for them too, so that the first
  // rounds are whole batches; release_reserved() forgets those not yet joined (a thread that did
  // not start).
  void reserve(int k) {
    const std::lock_guard<std::mutex> lock(mutex_);
    reserved_ += k;
  }
  void release_reserved() {
    const std::lock_guard<std::mutex> lock(mutex_);
    reserved_ = 0;
    changed_.notify_all();
  }

 private:
  friend class OpenclBatchMember;
  friend struct OpenclBatchAccess;
  std::mutex mutex_;
  std::condition_variable changed_;
  int members_ = 0, reserved_ = 0;  // joined, and expected to join
  bool launching_ = false;
  int launches_ = 0;
  std::vector<OpenclCall*> waiting_;
};

// The calling thread is a member of `batch` for this object's lifetime (one batch per thread).
class OpenclBatchMember {
 public:
  explicit OpenclBatchMember(OpenclBatch& batch);
  ~OpenclBatchMember();
  OpenclBatchMember(const OpenclBatchMember&) = delete;
  OpenclBatchMember& operator=(const OpenclBatchMember&) = delete;

 private:
  OpenclBatch& batch_;
  OpenclBatch* previous_;
};

// The opencl platform's entry of the seam (attention_kernel.hpp): opencl_attention below (the
// threads are the device's; no attention statistics yet).
const AttentionKernel& opencl_attention_kernel();

// Y = sum_h A_h V_h (Y resized to N x d and overwritten). Returns the attention statistics.
// RuntimeError naming the platform for a device or build failure (no device, no float64 on the
// device, the OpenCL compiler's log); without OpenCL in the build, RuntimeError.
AttentionStats opencl_attention(const Eigen::Ref<const Matrix>& X, const LayerWeights& w, double d_qk,
                                const MaskRows& rows, Matrix& Y);
AttentionStats opencl_attention(const Eigen::Ref<const MatrixF>& X, const LayerWeightsT<float>& w, double d_qk,
                                const MaskRows& rows, MatrixF& Y);  // run.precision = float32

}  // namespace rcsim
