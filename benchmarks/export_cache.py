"""Cold vs warm export time per model: what the export cache saves, and that a hit is cheap.

For each model × dtype: a cold export (torch.export, quantization, lowering, serialization, and
the numerics run in the native runner) into a fresh cache, then a warm hit in the same process,
then a warm hit in a fresh process (timed around ``export_model`` only; that process imports the
model module, hence torch, but the hit itself imports neither torch nor executorch). The first
cold export of a process also pays a one-time lowering warm-up of about 10 s.

    python benchmarks/export_cache.py [--models toy_cnn,vit_tiny] [--dtypes fp32,int8]
                                      [--cache DIR]

Exits 1 if any warm hit of a successful export takes 1 s or more. Failed exports are not cached
on disk (a fixed environment must be able to retry), so a fresh process pays them again; they
are listed, not counted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import models  # noqa: E402  (registers the examples)
from pytest_sme2.errors import ExportError, NumericsError  # noqa: E402
from pytest_sme2.export import export_model  # noqa: E402
from pytest_sme2.models import get_model  # noqa: E402

WARM_BUDGET_S = 1.0

#: Run in a fresh interpreter: one warm hit, timed, and whether it imported torch/executorch.
FRESH_HIT = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import models
from pytest_sme2.export import export_model
from pytest_sme2.models import get_model
spec = get_model(sys.argv[2])
before = {name for name in sys.modules if name.startswith("executorch")}
started = time.perf_counter()
try:
    export_model(spec, sys.argv[3], cache_dir=Path(sys.argv[4]))
except Exception:  # the same error as the cold export: re-raised from the cache
    pass
seconds = time.perf_counter() - started
after = {name for name in sys.modules if name.startswith("executorch")}
print(json.dumps({"seconds": seconds, "imported_executorch": bool(after - before)}))
"""


def _timed_export(name: str, dtype: str, cache: Path) -> tuple[float, str, bool]:
    """Seconds, outcome, and whether the outcome is cached on disk (success or NumericsError)."""
    started = time.perf_counter()
    try:
        artifact = export_model(get_model(name), dtype, cache_dir=cache)
        assert artifact.numerics is not None
        outcome, cached = f"ok, {artifact.numerics.describe()}", True
    except ExportError as err:
        outcome = f"{type(err).__name__} at {err.stage}: {err.cause}"
        cached = isinstance(err, NumericsError)
    return time.perf_counter() - started, outcome, cached


def _fresh_hit(name: str, dtype: str, cache: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_HIT, str(REPO), name, dtype, str(cache)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(models.__all__))
    parser.add_argument("--dtypes", default="fp32")
    parser.add_argument("--cache", type=Path, help="export cache (default: a fresh temp dir)")
    args = parser.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="sme2-export-bench-"))
    print(f"cache: {cache}")
    print(f"{'model-dtype':32} {'cold s':>8} {'warm s':>8} {'fresh s':>8}  outcome")
    over_budget, uncached = [], []
    for name in args.models.split(","):
        for dtype in args.dtypes.split(","):
            cold, outcome, cached = _timed_export(name, dtype, cache)
            warm, _, _ = _timed_export(name, dtype, cache)
            fresh = _fresh_hit(name, dtype, cache)
            label = f"{name}-{dtype}"
            print(f"{label:32} {cold:8.2f} {warm:8.4f} {fresh['seconds']:8.4f}  {outcome}")
            if not cached:
                uncached.append(label)
            elif (
                max(warm, float(fresh["seconds"])) >= WARM_BUDGET_S or fresh["imported_executorch"]
            ):
                over_budget.append(label)
    if uncached:
        print(f"failed exports, re-exported by every fresh process: {uncached}")
    if over_budget:
        print(f"warm hits over {WARM_BUDGET_S} s or importing executorch: {over_budget}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
