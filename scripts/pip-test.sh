#!/usr/bin/env bash
# The Python package as a user installs it (pyproject.toml, packaging/rcsim_build.py), offline:
# in a fresh venv (Debian's python3 -m venv --system-site-packages, for numpy/h5py/xarray),
# `pip install --no-index .`, then from another directory: import rcsim and print its version,
# a tiny rcsim.simulate(...), and `rcsim --version` from the venv's bin; then the same with
# `pip install --no-index -e .`. Both must report the version in the file VERSION.
# The CMake build goes to build/ when scripts/setup.sh made it (Release, this tree), else build/pip
# (persistent: a rerun is incremental). Prints the times.
# Usage: bash scripts/pip-test.sh    (needs scripts/deps.txt installed, python3-venv among them)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3
want="$(tr -d '[:space:]' <"$root/VERSION")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

check_install() {  # $1 = venv, $2 = what (wheel | editable)
  local venv=$1 what=$2
  mkdir -p "$tmp/elsewhere"
  cd "$tmp/elsewhere"
  local got
  got="$("$venv/bin/python" -c 'import rcsim; print(rcsim.__version__)')"
  [ "$got" = "$want" ] || { echo "pip-test: $what: rcsim.__version__ is '$got', VERSION says '$want'" >&2; exit 1; }
  "$venv/bin/python" - "$venv" "$what" "$root" <<'PY'
import os, sys
import rcsim
venv, what, root = sys.argv[1:4]
ds = rcsim.simulate(model={"tokens": 4, "dim": 3, "layers": 2}, run={"trials": 2})
assert ds.mu.shape == (2, 3), ds.mu.shape
import rcsim._engine as engine
pkg = os.path.dirname(os.path.abspath(rcsim.__file__))
if what == "wheel":  # everything inside the venv, nothing from the source tree
    for f in (rcsim.__file__, engine.__file__, rcsim.executable()):
        assert os.path.abspath(f).startswith(os.path.abspath(venv) + os.sep), (what, f)
else:  # editable: the package is the source tree's python/rcsim
    assert os.path.samefile(pkg, os.path.join(root, "python", "rcsim")), pkg
assert os.path.dirname(os.path.abspath(engine.__file__)) == pkg, engine.__file__
print(f"pip-test: {what}: rcsim {rcsim.__version__} from {pkg}; simulate gave mu {ds.mu.shape}")
PY
  local v
  v="$("$venv/bin/rcsim" --version)"
  case "$v" in "rcsim $want "*) ;; *) echo "pip-test: $what: '$venv/bin/rcsim --version' printed '$v'" >&2; exit 1 ;; esac
  echo "pip-test: $what: $venv/bin/rcsim --version: $v"
  set +e
  "$venv/bin/rcsim" run --model.tokenz=3 >/dev/null 2>&1
  local status=$?
  set -e
  [ "$status" -eq 2 ] || { echo "pip-test: $what: rcsim with an unknown key exited $status, expected 2" >&2; exit 1; }
  cd "$root"
}

for what in wheel editable; do
  venv="$tmp/venv-$what"
  "$py" -m venv --system-site-packages "$venv"
  flags=(); [ "$what" = editable ] && flags=(-e)
  start=$(date +%s.%N)
  "$venv/bin/pip" install --no-index -q "${flags[@]}" "$root"
  secs=$("$py" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$start" "$(date +%s.%N)")
  echo "pip-test: pip install${flags[*]:+ ${flags[*]}} . took ${secs} s"
  check_install "$venv" "$what"
done
echo "pip-test: pip install . and pip install -e . both work"
