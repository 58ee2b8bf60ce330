#!/usr/bin/python3
"""Issue 38: `pip install .` from a read-only source tree (packaging/rcsim_build.py).

    readonly_pip.py

Everything is written in a temporary folder outside the tree (removed at the end): the tree is
read-only while pip runs.

The tree is this checkout, bind-mounted read-only in a private mount namespace (`unshare -m`;
skipped, exit 77, where the system refuses it). CMake is replaced by a stand-in on PATH that makes
the two build products at once (what is tested is the backend's choice of folders and its
errors, not the compiler). Cases: `pip install .` succeeds, building in TMPDIR/rcsim-pip-HASH,
and the installed package holds the engine and the executable; `pip install -e .` fails with one
line naming the read-only folder and pointing to `pip install .`, no traceback; a build-dir that
cannot be written is one line naming it; a failing CMake is one line with its exit status.
Exit 0 iff every case passes.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FAKE_CMAKE = """#!/bin/sh
# a stand-in for cmake: configure makes CMakeCache.txt, build makes the executable and the engine
[ -n "$FAKE_CMAKE_FAIL" ] && exit 7
if [ "$1" = "-S" ]; then mkdir -p "$4" && touch "$4/CMakeCache.txt"; exit 0; fi
if [ "$1" = "--build" ]; then
  mkdir -p "$2/sim" "$2/python/rcsim" && printf '#!/bin/sh\\necho fake\\n' > "$2/sim/rcsim" && chmod +x "$2/sim/rcsim"
  echo so > "$2/python/rcsim/_engine.fake.so"; exit 0
fi
exit 3
"""


def main():
    work = tempfile.mkdtemp(prefix="rcsim-readonly-pip-")
    try:
        return run_cases(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_cases(work):
    os.makedirs(os.path.join(work, "bin"))
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp)
    with open(os.path.join(work, "bin", "cmake"), "w") as f:
        f.write(FAKE_CMAKE)
    os.chmod(os.path.join(work, "bin", "cmake"), 0o755)
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {ROOT} {ROOT} && "
                            f"mount -o remount,bind,ro {ROOT} && ! touch {ROOT}/.rcsim-ro-probe"],
                           capture_output=True)
    if probe.returncode != 0:
        print("readonly_pip: skipped (no private read-only mount here: unshare -m needs root)")
        return 77
    env = dict(os.environ, PATH=os.path.join(work, "bin") + os.pathsep + os.environ["PATH"], TMPDIR=tmp,
               PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("RCSIM_PIP_BUILD_DIR", None)

    def pip(args, extra_env=None):
        cmd = f"mount --bind {ROOT} {ROOT} && mount -o remount,bind,ro {ROOT} && " \
              f"{sys.executable} -m pip install -v {args}"
        return subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True,
                              env=dict(env, **(extra_env or {})), timeout=300)

    failures = []

    def check(ok, what, r=None):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)
            if r is not None:
                print("    output:", (r.stdout + r.stderr)[-1500:])

    def one_line(r, *needles):
        lines = [ln.strip() for ln in (r.stdout + r.stderr).splitlines() if "rcsim_build: error:" in ln]
        return (r.returncode != 0 and "Traceback" not in r.stdout + r.stderr and len(lines) == 1
                and all(n in lines[0] for n in needles))

    target = os.path.join(work, "target")
    r = pip(f"--target {target} {ROOT}")
    built = [d for d in os.listdir(tmp) if d.startswith("rcsim-pip-")]
    check(r.returncode == 0 and os.path.isfile(os.path.join(target, "rcsim", "bin", "rcsim"))
          and os.path.isfile(os.path.join(target, "rcsim", "_engine.fake.so")) and len(built) == 1
          and "is read-only: building in" in r.stdout + r.stderr,
          "pip install . from a read-only tree builds in TMPDIR/rcsim-pip-HASH and installs", r)
    r = pip(f"--target {os.path.join(work, 'target2')} -e {ROOT}")
    check(one_line(r, "read-only", "pip install ."), "pip install -e . from a read-only tree: one line", r)
    r = pip(f"--target {os.path.join(work, 'target3')} {ROOT} --config-settings build-dir={ROOT}/build/elsewhere")
    check(one_line(r, "build/elsewhere", "cannot be written"), "an unwritable build-dir: one line naming it", r)
    shutil.rmtree(os.path.join(tmp, built[0]) if built else tmp, ignore_errors=True)
    r = pip(f"--target {os.path.join(work, 'target4')} {ROOT}", {"FAKE_CMAKE_FAIL": "1"})
    check(one_line(r, "cmake", "exit 7"), "a failing cmake: one line with its exit status", r)
    print(f"readonly_pip: {4 - len(failures)} of 4 cases pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
