#!/usr/bin/env bash
# The project's own tests' set-up, idempotent: the main job's packages and the `dev` extra
# (pytest-xdist, ruff, import-linter, mkdocs-material, actionlint) and the `corpus` extra
# (transformers, for the one library model CI runs: tests/e2e/test_corpus.py), and adb when there is
# none (scripts/install_adb.sh: the android device's tests run a real adb server). No browser: the
# one test that opens one installs Debian's chromium when it is missing (scripts/install_chromium.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/pip_install.sh dev corpus
bash scripts/install_adb.sh
