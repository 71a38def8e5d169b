#!/usr/bin/env bash
# Everything pytest-sme2 needs on a fresh Debian-like machine with Python 3.11, idempotent.
# torch is pinned to 2.13.0: on these machines that resolves to a local CPU wheel, while an
# unpinned torch would download several GB of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
# corpus: transformers, for the one library model CI runs (tests/e2e/test_corpus.py)
python -m pip install --quiet --disable-pip-version-check -e ".[dev,corpus]"
# Headless Chromium renders the HTML report in its test (Debian package; skipped when present).
bash scripts/install_chromium.sh
