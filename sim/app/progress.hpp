// Progress of a run or a sweep: trials counted, time estimated by work. On a terminal (stderr is a
// tty) a bar with rate and ETA redrawn in place; otherwise (a log file, a batch job) one log line
// every `log_interval` seconds; nothing with --quiet. An observer (rcsim.sweep's progress in
// Python) is told the state at every update, whatever the mode.
//
// The ETA is the work left at the rate of the work computed so far, where a point's work per trial
// is its estimated cost (the sweep runner's: layers x the products of a layer), not one trial:
// points that cost 10x more per trial are not estimated at the rate of the cheap ones before them.
// The rate is measured over the time spent in trials only; the time of a point outside its trials
// (setting up, writing its file) is measured apart and counted once per point left.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace rcsim {

// Where a run or sweep stands (Progress::state).
struct ProgressState {
  long trials_done = 0, trials_total = 0;  // trials done (resumed ones included) of all
  int point = 0, points = 0;               // the current point (1-based) of the points
  std::string name;                        // the current point's name (its output file)
  double fraction = 0;                     // of the work done (resumed work included), 0..1
  double elapsed = 0;                      // seconds since the start
  double trial_rate = 0;                   // trials computed per second
  double eta = 0;                          // seconds left (NaN until some work is computed)
};

// Seconds left for `work_left` at the rate of `work_computed` in `trial_seconds` (work resumed
// from a checkpoint is not in `work_computed`: it took no time here), plus `overhead_left` seconds
// outside the trials; NaN before any work is computed.
double eta_by_work(double work_left, double work_computed, double trial_seconds, double overhead_left = 0);

class Progress {
 public:
  enum class Mode { off, bar, log };
  // off if `quiet`, bar if stderr is a terminal, else log.
  static Mode mode_for(bool quiet);
  using Observer = std::function<void(const ProgressState&)>;

  // `total_work`: the sum over the points of trials x work per trial (begin_point's); <= 0
  // counts a trial as one unit of work.
  Progress(Mode mode, long total_trials, int total_points, double log_interval_seconds = 10.0,
           double total_work = 0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  Mode mode() const { return mode_; }
  void set_observer(Observer observer) { observer_ = std::move(observer); }
  // The clock, in seconds since the start (tests give the time; default: the steady clock).
  void set_clock(std::function<double()> clock) { clock_ = std::move(clock); }
  // A point (run) of `trials` trials starts, each `work_per_trial` units of work.
  void begin_point(const std::string& name, int trials, double work_per_trial = 1.0);
  // Within the current point: `done` of `todo` trials computed (trials - todo were resumed
  // from a checkpoint).
  void trials_done(int done, int todo);
  // The current point is finished.
  void end_point();
  // Erase the bar (before a log line); it is redrawn at the next update.
  void clear();

  // The state `elapsed` seconds after the start (a function of the counts and the times of the
  // calls so far).
  ProgressState state(double elapsed) const;
  // The bar's or log's text of a state ("[###.....]  40% 4/10 trials, point 2/5, ..., ETA 0:12").
  static std::string describe(const ProgressState& s, bool bar);
  // "1:02:03" / "2:03" for a duration in seconds; "?" if not finite.
  static std::string format_duration(double seconds);

 private:
  void update(bool force);
  double now() const;

  Mode mode_;
  long total_ = 0, done_before_point_ = 0, computed_before_point_ = 0;
  double total_work_ = 0, work_before_point_ = 0, computed_work_before_point_ = 0, point_work_ = 1;
  int points_ = 0, point_ = 0, point_trials_ = 0, point_done_ = 0, point_todo_ = 0;
  std::string name_;
  // Seconds: in trials over the finished points, outside them (set-up, writing) over the finished
  // points; the current point's start, first trial call (-1: none yet) and last trial call.
  double trial_seconds_ = 0, overhead_seconds_ = 0, point_start_ = 0, trials_start_ = -1, trials_last_ = 0;
  int points_finished_ = 0;
  double interval_;
  std::chrono::steady_clock::time_point start_, last_;
  bool drawn_ = false;
  Observer observer_;
  std::function<double()> clock_;
};

}  // namespace rcsim
