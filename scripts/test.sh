#!/usr/bin/env bash
# One command: install what is missing, build, and run every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Test-only packages (never needed to build): PyTorch for the autograd reference check of the
# backward pass (ctest reference_autograd_torch, skipped without it).
test_only=(python3-torch)
missing=()
for p in "${test_only[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "test: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
ctest --test-dir build --output-on-failure -j "$(nproc)"
