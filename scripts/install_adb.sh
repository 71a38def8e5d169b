#!/usr/bin/env bash
# adb for tests/devices/test_adb_server.py (a real adb server of its own on a free port: what adb
# says when its server is gone, empty or lacks a serial is matched against adb itself). Debian's
# `adb` package; does nothing when an adb is on PATH. Elsewhere (a Mac), Android platform-tools.
set -euo pipefail
if ! command -v adb >/dev/null 2>&1 && ! command -v apt-get >/dev/null 2>&1; then
    echo "adb is missing: install Android platform-tools (macOS: brew install android-platform-tools)" >&2
    exit 1
fi
exec bash "$(dirname "$0")/apt_install.sh" adb
