#!/usr/bin/env bash
# This checkout installed editable with the extras given (`bash scripts/pip_install.sh export`),
# unless it already is (scripts/install_check.py: 0.4 s instead of pip's 5.5 s). A checkout whose
# requirements are all installed here (a fresh clone in CI) is only re-pointed: pip without deps.
#
# pip installs without byte-compiling, then scripts/compile_installed.py compiles what it
# installed on every core (pip's one-process compile was most of a fresh venv's install).
set -euo pipefail
cd "$(dirname "$0")/.."
extras=$(IFS=,; echo "$*")
status=0
python scripts/install_check.py "$@" || status=$?
if [ "$status" -ne 0 ]; then
    report=$(mktemp)
    trap 'rm -f "$report"' EXIT
    pip=(python -m pip install --quiet --disable-pip-version-check --no-compile --report "$report")
    if [ "$status" -eq 2 ]; then  # install_check.REPOINT: every requirement is here
        "${pip[@]}" --no-deps --no-build-isolation -e ".[$extras]"
    else
        "${pip[@]}" -e ".[$extras]"
    fi
    python scripts/compile_installed.py "$report"
    python scripts/install_check.py --record "$@"
fi
