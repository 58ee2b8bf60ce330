#include "app/progress.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace rcsim {

double eta_by_work(double work_left, double work_computed, double trial_seconds, double overhead_left) {
  if (!(work_computed > 0) || !(trial_seconds > 0)) return NAN;
  return std::max(0.0, work_left) * trial_seconds / work_computed + std::max(0.0, overhead_left);
}

Progress::Mode Progress::mode_for(bool quiet) {
  if (quiet) return Mode::off;
  return ::isatty(STDERR_FILENO) ? Mode::bar : Mode::log;
}

Progress::Progress(Mode mode, long total_trials, int total_points, double log_interval_seconds, double total_work)
    : mode_(mode),
      total_(total_trials),
      total_work_(total_work > 0 ? total_work : static_cast<double>(total_trials)),
      points_(total_points),
      interval_(log_interval_seconds),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() {
  if (drawn_) std::fputs("\n", stderr);
}

std::string Progress::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

double Progress::now() const {
  if (clock_) return clock_();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::begin_point(const std::string& name, int trials, double work_per_trial) {
  ++point_;
  point_start_ = now();
  trials_start_ = -1;
  name_ = name;
  point_trials_ = trials;
  point_done_ = 0;
  point_todo_ = trials;
  point_work_ = work_per_trial;
}

void Progress::trials_done(int done, int todo) {
  trials_last_ = now();
  if (trials_start_ < 0) trials_start_ = trials_last_;  // run_to_file's first call: the trials start
  point_done_ = done;
  point_todo_ = todo;
  update(false);
}

void Progress::end_point() {
  const double t = now();
  const double in_trials = trials_start_ < 0 ? 0.0 : trials_last_ - trials_start_;
  trial_seconds_ += in_trials;
  overhead_seconds_ += t - point_start_ - in_trials;
  ++points_finished_;
  trials_start_ = -1;
  done_before_point_ += point_trials_;
  computed_before_point_ += point_done_;
  work_before_point_ += point_trials_ * point_work_;
  computed_work_before_point_ += point_done_ * point_work_;
  point_trials_ = point_done_ = point_todo_ = 0;
  update(false);
}

ProgressState Progress::state(double elapsed) const {
  ProgressState s;
  const int point_finished = point_trials_ - point_todo_ + point_done_;  // resumed + computed
  s.trials_done = done_before_point_ + point_finished;
  s.trials_total = total_;
  s.point = point_;
  s.points = points_;
  s.name = name_;
  const bool all_done = s.trials_done >= total_;  // exactly 1 and 0 s left, whatever the rounding of the sums
  const double work_done = all_done ? total_work_ : work_before_point_ + point_finished * point_work_;
  const double work_computed = computed_work_before_point_ + point_done_ * point_work_;
  s.fraction = total_work_ > 0 ? std::min(1.0, work_done / total_work_) : 1.0;
  s.elapsed = elapsed;
  s.trial_rate = elapsed > 0 ? static_cast<double>(computed_before_point_ + point_done_) / elapsed : 0.0;
  // The time in trials so far, and what is left outside them: each point not finished costs the
  // mean overhead of the finished ones, less what the current one has spent before its trials.
  const bool in_point = point_ > points_finished_;
  const double current_trials = in_point && trials_start_ >= 0 ? trials_last_ - trials_start_ : 0.0;
  const double current_before = !in_point ? 0.0 : (trials_start_ >= 0 ? trials_start_ : elapsed) - point_start_;
  const double mean_overhead = points_finished_ > 0 ? overhead_seconds_ / points_finished_ : 0.0;
  const double overhead_left = all_done ? 0.0 : (points_ - points_finished_) * mean_overhead - current_before;
  s.eta = eta_by_work(total_work_ - work_done, work_computed, trial_seconds_ + current_trials, overhead_left);
  return s;
}

std::string Progress::describe(const ProgressState& s, bool bar) {
  char buf[256];
  std::string line;
  if (bar) {
    const int width = 24, filled = static_cast<int>(s.fraction * width);
    line = "[" + std::string(static_cast<std::size_t>(filled), '#') +
           std::string(static_cast<std::size_t>(width - filled), '.') + "] ";
  }
  std::snprintf(buf, sizeof buf, "%3.0f%% %ld/%ld trials", 100.0 * s.fraction, s.trials_done, s.trials_total);
  line += buf;
  if (s.points > 1) line += ", point " + std::to_string(s.point) + "/" + std::to_string(s.points);
  std::snprintf(buf, sizeof buf, ", %.3g trials/s, elapsed %s, ETA %s", s.trial_rate,
                format_duration(s.elapsed).c_str(), format_duration(s.eta).c_str());
  return line + buf;
}

void Progress::update(bool force) {
  if (mode_ == Mode::off && !observer_) return;
  const auto wall = std::chrono::steady_clock::now();
  const ProgressState s = state(now());
  if (observer_) observer_(s);
  const double since = std::chrono::duration<double>(wall - last_).count();
  if (mode_ == Mode::bar) {
    if (!force && drawn_ && since < 0.2) return;
    last_ = wall;
    std::fprintf(stderr, "\r\033[K%s", describe(s, true).c_str());
    std::fflush(stderr);
    drawn_ = true;
  } else if (mode_ == Mode::log) {
    if (!force && since < interval_) return;
    last_ = wall;
    spdlog::info("progress: {}", describe(s, false));
  }
}

void Progress::clear() {
  if (mode_ == Mode::bar && drawn_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace rcsim
