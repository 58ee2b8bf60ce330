#include "app/progress.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace rcsim {

Progress::Mode Progress::mode_for(bool quiet) {
  if (quiet) return Mode::off;
  return ::isatty(STDERR_FILENO) ? Mode::bar : Mode::log;
}

Progress::Progress(Mode mode, long total_trials, int total_points, double log_interval_seconds)
    : mode_(mode),
      total_(total_trials),
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

void Progress::begin_point(const std::string& name, int trials) {
  ++point_;
  name_ = name;
  point_trials_ = trials;
  point_done_ = 0;
  point_todo_ = trials;
}

void Progress::trials_done(int done, int todo) {
  point_done_ = done;
  point_todo_ = todo;
  update(false);
}

void Progress::end_point() {
  done_before_point_ += point_trials_;
  computed_before_point_ += point_done_;
  point_trials_ = point_done_ = point_todo_ = 0;
  update(false);
}

std::string Progress::line() const {
  const long done = done_before_point_ + (point_trials_ - point_todo_) + point_done_;
  const long computed = computed_before_point_ + point_done_;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = elapsed > 0 ? computed / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : NAN;
  const double frac = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  char buf[256];
  std::string s;
  if (mode_ == Mode::bar) {
    const int width = 24, filled = static_cast<int>(frac * width);
    s = "[" + std::string(static_cast<std::size_t>(filled), '#') +
        std::string(static_cast<std::size_t>(width - filled), '.') + "] ";
  }
  std::snprintf(buf, sizeof buf, "%3.0f%% %ld/%ld trials", 100.0 * frac, done, total_);
  s += buf;
  if (points_ > 1) s += ", point " + std::to_string(point_) + "/" + std::to_string(points_);
  std::snprintf(buf, sizeof buf, ", %.3g trials/s, elapsed %s, ETA %s", rate, format_duration(elapsed).c_str(),
                format_duration(eta).c_str());
  s += buf;
  return s;
}

void Progress::update(bool force) {
  if (mode_ == Mode::off) return;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  if (mode_ == Mode::bar) {
    if (!force && drawn_ && since < 0.2) return;
    last_ = now;
    std::fprintf(stderr, "\r\033[K%s", line().c_str());
    std::fflush(stderr);
    drawn_ = true;
  } else {
    if (!force && since < interval_) return;
    last_ = now;
    spdlog::info("progress: {}", line());
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
