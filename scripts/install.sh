#!/usr/bin/env bash
# The main job's set-up on a fresh Debian-like machine with Python 3.11, idempotent: the plugin and
# what exporting needs (the `export` extra), nothing only the project's own tests use — those are
# scripts/install_tests.sh's. torch is pinned to 2.13.0: on these machines that resolves to a
# local CPU wheel, while an unpinned torch would download several GB of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
# scripts/install_check.py skips pip when this checkout is installed so already (5 s warm).
if ! python scripts/install_check.py export; then
    python -m pip install --quiet --disable-pip-version-check -e ".[export]"
    python scripts/install_check.py --record export
fi
