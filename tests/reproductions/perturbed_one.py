#!/usr/bin/env python3
"""One reproduction at --tiny size, as it is (must exit 0) or with a perturbed engine (must exit 1 with a
failed claim of the paper on stderr): the rule of perturbed.py for one script, as a ctest case.

usage: perturbed_one.py RCSIM SCRIPT [KEY=VALUE ...]

SCRIPT is relative to the repository root; without KEY=VALUE the script runs as it is. Exits 0 when the run
behaves as required, 1 otherwise, 2 on a usage error.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perturbed import REPO, run  # noqa: E402


def main():
    if len(sys.argv) < 3 or any("=" not in kv for kv in sys.argv[3:]):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    rcsim, script, perturb = sys.argv[1], sys.argv[2], tuple(sys.argv[3:])
    if not os.access(rcsim, os.X_OK):
        print(f"perturbed_one.py: RCSIM '{rcsim}' is not an executable file", file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(REPO, script)):
        print(f"perturbed_one.py: SCRIPT '{script}' is not a file under {REPO}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rcsim-perturbed-") as work:
        rc, sec, claims, tail = run(script, rcsim, work, "run", perturb)
    ok = rc == 1 and bool(claims) if perturb else rc == 0
    what = " --perturb ".join(("",) + perturb) if perturb else " (as it is)"
    print(f"{'ok ' if ok else 'BAD'} {script}{what}: exit {rc}, {sec:.1f} s; required "
          + ("exit 1 with a failed claim; failed: " + ("; ".join(c.split(':')[0] for c in claims) or "none")
             if perturb else "exit 0"))
    if not ok:
        for line in tail:
            print("      " + line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
