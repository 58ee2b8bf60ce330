#!/usr/bin/env bash
# The web page's build and browser test (docs/user/web.md): builds web/engine.js with emscripten,
# installs playwright-core from web/package-lock.json (never a browser: the test drives Debian's
# /usr/bin/chromium) and runs web/test/page.test.mjs, which also rewrites docs/web/*.png.
# Usage: bash scripts/web-test.sh   (needs emscripten, chromium, nodejs with npm)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
for tool in emcc node npm; do
  command -v "$tool" >/dev/null || { echo "web-test.sh: $tool not found (apt-get install emscripten chromium nodejs)" >&2; exit 2; }
done
bash "$root/scripts/build-web.sh"
cd "$root/web"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
node test/page.test.mjs
