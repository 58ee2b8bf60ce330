#!/usr/bin/env python3
"""A/B of two rcsim_bench builds on a busy machine (docs/dev/performance-log.md, "The measures").

Starts both workers once and sends every command to both, REPS times, alternating which goes
first, so that both see the same load; prints the median times and old/new, the ratio of the
medians, and the median of the per-repetition ratios (the more robust under changing load).

usage: ab.py OLD_BENCH NEW_BENCH REPS COMMAND [COMMAND ...]
  e.g. ab.py /tmp/base/build/rcsim_bench build/rcsim_bench 21 "run 128 64 complete 1 4 8 2"
COMMAND is a `run` line of bench/rcsim_bench.cpp (N D MASK MEASURES TRIALS LAYERS THREADS [SCHEDULE]).
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_bench import Worker  # noqa: E402


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    old, new = Worker([sys.argv[1]]), Worker([sys.argv[2]])
    reps = int(sys.argv[3])
    commands = sys.argv[4:]
    for w in (old, new):
        w.ask("run 32 16 complete 1 4 2 1")  # warm-up
    times = {}
    for rep in range(reps):
        for c in commands:
            for w in ((old, new) if rep % 2 == 0 else (new, old)):
                times.setdefault((c, w is new), []).append(w.ask(c)[0])
    for c in commands:
        a, b = times[(c, False)], times[(c, True)]
        ma, mb = statistics.median(a), statistics.median(b)
        pair = statistics.median(x / y for x, y in zip(a, b))
        print(f"{c:42s} old {ma * 1e3:9.2f} ms  new {mb * 1e3:9.2f} ms  old/new {ma / mb:5.3f}  "
              f"median per-repetition ratio {pair:5.3f}")
    old.close()
    new.close()


if __name__ == "__main__":
    main()
