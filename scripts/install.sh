#!/usr/bin/env bash
# The main job's set-up on a fresh Debian-like machine with Python 3.11, idempotent: the plugin and
# what exporting needs (the `export` extra), nothing only the project's own tests use — those are
# scripts/install_tests.sh's. torch is pinned to 2.13.0: on these machines that resolves to a
# local CPU wheel, while an unpinned torch would download several GB of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/pip_install.sh export
