#include "kernel/trial/trial_batch.hpp"

#include <exception>
#include <mutex>

#include "kernel/support/threads.hpp"

namespace rcsim {

TrialBatch::TrialBatch(const EngineSetup& s, const std::vector<int>& trials) {
  for (const int t : trials) trials_.push_back(std::make_unique<Trial>(s, t));
  if (s.platform == Platform::opencl && trials.size() > 1) batch_ = std::make_unique<OpenclBatch>();
}

void TrialBatch::set_cancel(const std::atomic<bool>* cancel) {
  for (auto& t : trials_) t->set_cancel(cancel);
}

std::vector<LayerReport> TrialBatch::step() {
  std::vector<LayerReport> reports(static_cast<std::size_t>(size()));
  for_each([&](int b, Trial& trial) { reports[static_cast<std::size_t>(b)] = trial.step(); });
  return reports;
}

void TrialBatch::for_each(const std::function<void(int, Trial&)>& run_one) {
  const int B = size();
  if (!batch_) {
    for (int b = 0; b < B; ++b) run_one(b, *trials_[static_cast<std::size_t>(b)]);
    return;
  }
  // One thread per trial, each a member of the batch for as long as it runs trials: a round of
  // attention calls is launched once every member still running has one waiting.
  std::atomic<int> next{0};
  std::exception_ptr error;
  std::mutex mutex;
  const auto worker = [&] {
    const OpenclBatchMember member(*batch_);
    for (int b = next.fetch_add(1); b < B; b = next.fetch_add(1)) {
      try {
        run_one(b, *trials_[static_cast<std::size_t>(b)]);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  batch_->reserve(B);  // every round waits for all B threads, the first one too
  run_workers(B - 1, true, worker, [&] { next.store(B); batch_->release_reserved(); }, "run.trials", B);
  if (error) std::rethrow_exception(error);
}

}  // namespace rcsim
