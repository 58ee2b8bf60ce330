#!/usr/bin/env python3
"""One version everywhere: the file VERSION is the only source; CMake's project version, the
executable (`rcsim --version`), the Python package (rcsim.__version__: the build tree's package
and the source tree's), the wheel backend, CITATION.cff and CHANGELOG.md must all agree with it.
Also checks CITATION.cff's required CFF 1.2.0 keys and its references (the seed papers).

Usage: check_version.py RCSIM BUILD_DIR
"""
import os
import re
import subprocess
import sys

import yaml

rcsim_exe, build = sys.argv[1], os.path.abspath(sys.argv[2])
root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


with open(os.path.join(root, "VERSION"), encoding="utf-8") as f:
    text = f.read()
v = text.strip()
check(re.fullmatch(r"\d+\.\d+\.\d+", v) is not None, f"VERSION holds '{v}', expected MAJOR.MINOR.PATCH")
check(text == v + "\n", "VERSION must be the version and one newline")

out = subprocess.run([rcsim_exe, "--version"], capture_output=True, text=True)
check(out.returncode == 0 and out.stdout.startswith(f"rcsim {v} "), f"rcsim --version printed {out.stdout!r}")

with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
    cache = f.read()
m = re.search(r"^CMAKE_PROJECT_VERSION:STATIC=(.*)$", cache, re.M)
check(m is not None and m.group(1) == v, f"CMake's project version is {m.group(1) if m else None}")

for where, path in (("build tree", os.path.join(build, "python")), ("source tree", os.path.join(root, "python"))):
    r = subprocess.run([sys.executable, "-c", "import rcsim; print(rcsim.__file__); print(rcsim.__version__)"],
                       capture_output=True, text=True, cwd="/", env=dict(os.environ, PYTHONPATH=path))
    lines = r.stdout.split()
    check(r.returncode == 0 and len(lines) == 2 and lines[0].startswith(path) and lines[1] == v,
          f"{where} package: {r.stdout!r} {r.stderr[-500:]!r}")

sys.path.insert(0, os.path.join(root, "packaging"))
import rcsim_build  # noqa: E402
check(rcsim_build._version() == v, f"the wheel backend reads {rcsim_build._version()}")

with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
    pyproject = f.read()
check(re.search(r'^dynamic = \["version"\]$', pyproject, re.M) is not None, "pyproject.toml: version must be dynamic")
check(re.search(r"^version\s*=", pyproject, re.M) is None, "pyproject.toml must not state a version")
check('build-backend = "rcsim_build"' in pyproject, "pyproject.toml: build-backend")

with open(os.path.join(root, "CITATION.cff"), encoding="utf-8") as f:
    cff = yaml.safe_load(f)
check(cff.get("cff-version") == "1.2.0", "CITATION.cff: cff-version 1.2.0")
for key in ("cff-version", "message", "title", "authors"):  # required by CFF 1.2.0
    check(key in cff, f"CITATION.cff: required key '{key}' missing")
check(str(cff.get("version")) == v, f"CITATION.cff version {cff.get('version')} != VERSION {v}")
check(cff.get("license") == "MIT" and cff.get("title") == "rcsim", "CITATION.cff: title rcsim, license MIT")
refs = cff.get("references", [])
arxiv = sorted(i["value"] for r in refs for i in r.get("identifiers", []))
check(arxiv == ["arXiv:2305.02582", "arXiv:2405.04134", "arXiv:2405.18781"], f"CITATION.cff references: {arxiv}")
for r in refs:
    check(all(k in r for k in ("type", "title", "authors")) and r["authors"], f"reference {r.get('title')}: type, title, authors")

with open(os.path.join(root, "CHANGELOG.md"), encoding="utf-8") as f:
    changelog = f.read()
check("## [Unreleased]" in changelog, "CHANGELOG.md: no Unreleased section")
check(re.search(rf"^## \[{re.escape(v)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M) is not None,
      f"CHANGELOG.md: no entry '## [{v}] - YYYY-MM-DD'")

print(f"check_version: {v}: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
