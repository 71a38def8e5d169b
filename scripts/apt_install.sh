#!/usr/bin/env bash
# apt_install.sh PACKAGE [COMMAND]: installs Debian's PACKAGE (quietly; through sudo where not root)
# unless COMMAND (default: PACKAGE) is on PATH already, then checks that it is. The one way a
# set-up script or a test takes a tool from apt (adb, chromium).
set -euo pipefail
package="$1"
command_name="${2:-$1}"
if command -v "$command_name" >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$package" >/dev/null
command -v "$command_name" >/dev/null
