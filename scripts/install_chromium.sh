#!/usr/bin/env bash
# Headless Chromium for tests/e2e/test_report_e2e.py (it opens the pytest-html report and checks that
# every chart rendered). Debian's `chromium` package; does nothing when a chromium is on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null
