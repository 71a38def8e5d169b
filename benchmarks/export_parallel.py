"""The export phase of a cold session, one export at a time against side by side, in one run.

A session alone exports every case before it measures (``pytest_sme2.export.prefetch.prefetch``);
this times that phase for the example cases from an empty export cache, first with one process, then
with one per core, each in a fresh interpreter and a fresh cache (the runner binary is built
once, beforehand, and shared: both phases pay the same numerics runs). Compare the ratio, not
the seconds: a shared machine moves both.

    python benchmarks/export_parallel.py [--models toy_cnn,vit_tiny] [--processes 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PHASE = """
import sys
sys.path.insert(0, {repo!r})
import models  # registers the examples
from pytest_sme2.export.prefetch import prefetch
from pytest_sme2.export.model_spec import registered_models

wanted = {models!r}
pairs = [
    (spec, dtype)
    for spec in registered_models()
    if spec.factory.__module__.startswith("models.") and (not wanted or spec.name in wanted)
    for dtype in spec.dtypes
]
prefetch(pairs, processes={processes})
print(len(pairs))
"""


def phase(models: list[str], processes: int, runner: Path) -> tuple[float, str]:
    """Seconds of one cold export phase with ``processes``, and how many pairs it exported."""
    with tempfile.TemporaryDirectory(prefix="sme2-export-parallel-") as cache:
        shutil.copytree(runner, Path(cache) / "runner")
        env = {**os.environ, "SME2_CACHE_DIR": cache}
        script = PHASE.format(repo=str(REPO), models=models, processes=processes)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        return time.perf_counter() - started, done.stdout.strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="", help="comma-separated (default: every example)")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from pytest_sme2.cache import cache_root
    from pytest_sme2.runner import build_runner

    build_runner()  # built once, in the user's cache; each phase gets a copy
    runner = cache_root() / "runner"
    models = [name for name in args.models.split(",") if name]
    serial, pairs = phase(models, 1, runner)
    parallel, _ = phase(models, args.processes, runner)
    print(f"cold export phase of {pairs} example cases, {os.cpu_count()} cores")
    print(f"  one at a time      {serial:7.1f} s")
    print(f"  {args.processes} side by side     {parallel:7.1f} s")
    print(f"  ratio              {serial / parallel:7.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
