"""The console script `rcsim` of the pip-installed package: runs the rcsim executable that the
wheel puts inside the package (rcsim/bin/rcsim) with the same arguments (exec: same process id,
exit status and signals)."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "rcsim")
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"rcsim: the executable {exe} is missing from the installed package; "
                         "reinstall with `pip install .`\n")
        return 1
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
