// Progress of a run or a sweep, counted in trials: on a terminal (stderr is a tty) a bar with
// rate and ETA redrawn in place; otherwise (a log file, a batch job) one log line every
// `log_interval` seconds; nothing with --quiet.
#pragma once

#include <chrono>
#include <string>

namespace rcsim {

class Progress {
 public:
  enum class Mode { off, bar, log };
  // off if `quiet`, bar if stderr is a terminal, else log.
  static Mode mode_for(bool quiet);

  Progress(Mode mode, long total_trials, int total_points, double log_interval_seconds = 10.0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  Mode mode() const { return mode_; }
  // A point (run) of `trials` trials starts.
  void begin_point(const std::string& name, int trials);
  // Within the current point: `done` of `todo` trials computed (trials - todo were resumed
  // from a checkpoint).
  void trials_done(int done, int todo);
  // The current point is finished.
  void end_point();
  // Erase the bar (before a log line); it is redrawn at the next update.
  void clear();

  // "1:02:03" / "2:03" for a duration in seconds; "?" if not finite.
  static std::string format_duration(double seconds);

 private:
  void update(bool force);
  std::string line() const;

  Mode mode_;
  long total_ = 0, done_before_point_ = 0, computed_before_point_ = 0;
  int points_ = 0, point_ = 0, point_trials_ = 0, point_done_ = 0, point_todo_ = 0;
  std::string name_;
  double interval_;
  std::chrono::steady_clock::time_point start_, last_;
  bool drawn_ = false;
};

}  // namespace rcsim
