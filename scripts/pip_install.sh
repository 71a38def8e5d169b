#!/usr/bin/env bash
# This checkout installed editable with the extras given (`bash scripts/pip_install.sh export`),
# unless it already is (scripts/install_check.py: 0.4 s instead of pip's 5.5 s).
#
# pip installs without byte-compiling, then the standard library's compileall compiles the site
# directory on every core: from a fresh venv, pip's own one-process compile of torch and
# executorch's 17,000 files made the `export` extra's install 53–69 s, against 25 s + 21 s this
# way (EPYC 26/2, 2 vCPUs; docs/costs.md). The files are compiled all the same, so no process
# compiles them again at import (nor on every import where PYTHONDONTWRITEBYTECODE is set). As
# with pip's own compile, a file that does not compile (a template, a test for another Python)
# is left as it is and is no install failure.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=$(IFS=,; echo "$*")
if ! python scripts/install_check.py "$@"; then
    python -m pip install --quiet --disable-pip-version-check --no-compile -e ".[$extras]"
    python - <<'PY'
import compileall, sysconfig
for path in sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}):
    compileall.compile_dir(path, quiet=2, workers=0)
PY
    python scripts/install_check.py --record "$@"
fi
