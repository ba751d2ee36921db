#!/usr/bin/env bash
# Debian's Chromium for the status page's browser tests (tests/e2e/test_status_browser.py),
# installed once: a machine that has /usr/bin/chromium already is left alone. Playwright's own
# browser download (`playwright install`) is never used; its client drives this binary.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium
test -x /usr/bin/chromium
