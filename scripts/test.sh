#!/usr/bin/env bash
# One command: install what is missing, build, and run every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
