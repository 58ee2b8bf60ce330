#!/usr/bin/env bash
# Install the Debian packages listed in scripts/deps.txt (and RCSIM_EXTRA_PACKAGES) that are missing, then configure and
# build rcsim into build/ (everything, or the targets in RCSIM_TARGETS). Safe to rerun:
# installs nothing and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t wanted < <(grep -v '^\s*#' scripts/deps.txt | sed '/^\s*$/d')
# RCSIM_EXTRA_PACKAGES: more packages for this call only (scripts/test.sh: the test-only ones).
read -r -a extra <<< "${RCSIM_EXTRA_PACKAGES:-}"
wanted+=("${extra[@]}")
missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${RCSIM_CMAKE_ARGS:-} >/dev/null
# RCSIM_TARGETS limits the build (run-default.sh builds only the rcsim executable).
cmake --build build -j "$(nproc)" ${RCSIM_TARGETS:+--target $RCSIM_TARGETS}
