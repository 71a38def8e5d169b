#!/usr/bin/env bash
# Headless Chromium for tests/e2e/test_report_e2e.py (it opens the pytest-html report and checks that
# every chart rendered), which runs this when it finds none. Debian's `chromium` package; does
# nothing when a chromium is on PATH.
set -euo pipefail
if command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
exec bash "$(dirname "$0")/apt_install.sh" chromium
