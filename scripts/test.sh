#!/usr/bin/env bash
# One command: install what is missing, build, and run every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
# Test-only packages (never needed to build): PyTorch for the autograd reference check of the
# backward pass (ctest reference_autograd_torch, skipped without it).
RCSIM_EXTRA_PACKAGES="python3-torch" bash scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
