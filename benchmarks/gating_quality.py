"""How well the latency gate separates noise from regressions, beside pytest-benchmark's.

A user model (a plain-torch CNN, ~3 ms per run on a 2-core host) is registered in a temporary
project with its input width read from ``SME2_GATING_WIDTH``. Its baseline is recorded at the base
width; then ``--runs`` pytest sessions are run for each cell — unchanged, +5 % and +10 % pixels
(the same graph exported afresh at a wider input) — interleaved, the cell order rotating so that
drift of the machine hits every cell alike. Each session is the plugin's real flow (measure,
judge, confirm a time-only failure after settling) with ``--benchmark-json``; on the very same
runs pytest-benchmark's own compare-fail checks (``median:10%``, ``median:5%``, from
``pytest_benchmark.utils.parse_compare_fail``) judge that JSON against the baseline session's.

    python benchmarks/gating_quality.py [--runs 20] [--base-width 160] [--out FILE]
                                        [--tolerance PERCENT] [--keep DIR]

Prints the six cells as "k/N failed" (rows: unchanged, +5 %, +10 %; columns: ours and
pytest-benchmark at 10 % and 5 %), the targets of issue 9 (0/N false alarms, ≥ 95 % caught at
+10 %, ≥ 75 % at +5 %), and per session the fastest-run and median ratios to the baseline. ``--out``
writes every session's latency samples as JSON, to re-judge offline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_benchmark.utils import parse_compare_fail

REPO = Path(__file__).resolve().parents[1]

CONFTEST = '''
import os
import torch
from pytest_sme2 import register_model

WIDTH = int(os.environ["SME2_GATING_WIDTH"])

def gq_inputs(seed):
    return (torch.randn(1, 3, 128, WIDTH, generator=torch.Generator().manual_seed(seed)),)

@register_model("gq_net", inputs=gq_inputs, dtypes=("fp32",))
def gq_net():
    """Four convolutions and a linear: about 3 ms a run at 128x160 on a 2-core host."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
    ).eval()
'''

SUITE = """
import pytest

@pytest.mark.sme2()
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""

#: pytest-benchmark's compare-fail expressions judged on the same runs.
BENCHMARK_CHECKS = ("median:10%", "median:5%")
CELLS = (("unchanged", 0.0), ("+5 %", 0.05), ("+10 %", 0.10))


def _session(project: Path, width: int, baselines: Path, out: Path, *extra: str) -> dict[str, Any]:
    """One pytest session of the project at ``width``: exit code, seconds, benchmark stats."""
    env = {**os.environ, "SME2_GATING_WIDTH": str(width), "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", str(project), "-q", "-p", "no:cacheprovider",
            "-p", "no:xdist", f"--sme2-baseline-dir={baselines}", f"--benchmark-json={out}",
            f"--rootdir={project}", *extra,
        ],
        env=env, cwd=project, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode not in (0, 1):
        sys.exit(f"pytest exited {proc.returncode} at width {width}:\n{proc.stdout[-3000:]}")
    doc = json.loads(out.read_text())
    (entry,) = [b for b in doc["benchmarks"] if b["group"] == "sme2:gq_net-fp32"]
    failure = next((ln for ln in proc.stdout.splitlines() if "E2E latency" in ln), "")
    return {
        "width": width,
        "failed": proc.returncode == 1,
        "seconds": time.perf_counter() - started,
        "stats": entry["stats"],
        "failure": failure.strip(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="sessions per cell")
    parser.add_argument("--base-width", type=int, default=160)
    parser.add_argument("--tolerance", help="--sme2-latency-tolerance for our gate (default: its)")
    parser.add_argument("--out", type=Path, help="write every session as JSON")
    parser.add_argument("--keep", type=Path, help="project directory to keep (default: temp)")
    args = parser.parse_args()
    project = args.keep or Path(tempfile.mkdtemp(prefix="sme2-gating-"))
    project.mkdir(parents=True, exist_ok=True)
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_gating.py").write_text(SUITE)
    baselines = project / "baselines"
    extra = (f"--sme2-latency-tolerance={args.tolerance}",) if args.tolerance else ()
    # +5 % and +10 % work: the width grows by that fraction, the height stays.
    widths = {name: round(args.base_width * (1 + grow)) for name, grow in CELLS}
    started = time.perf_counter()
    for width in widths.values():  # export every size before anything is timed
        _session(project, width, project / "warm", project / "warm.json", "--sme2-update-baselines")
    base = _session(
        project, widths["unchanged"], baselines, project / "base.json", "--sme2-update-baselines"
    )
    checks = [parse_compare_fail(expr) for expr in BENCHMARK_CHECKS]
    sessions: list[dict[str, Any]] = []
    for rep in range(args.runs):
        shift = rep % len(CELLS)
        for name, _ in CELLS[shift:] + CELLS[:shift]:
            run = _session(project, widths[name], baselines, project / f"run-{rep}.json", *extra)
            run["cell"], run["rep"] = name, rep
            run["benchmark_failed"] = {
                expr: bool(check.fails(run["stats"], base["stats"]))
                for expr, check in zip(BENCHMARK_CHECKS, checks, strict=True)
            }
            run["fastest_ratio"] = run["stats"]["min"] / base["stats"]["min"]
            run["median_ratio"] = run["stats"]["median"] / base["stats"]["median"]
            sessions.append(run)
            verdict = "FAIL" if run["failed"] else "pass"
            print(
                f"rep {rep:2} {name:9} width {run['width']}: ours {verdict}"
                f", fastest ×{run['fastest_ratio']:.3f}, median ×{run['median_ratio']:.3f}, "
                + ", ".join(
                    f"{expr} {'FAIL' if bad else 'pass'}"
                    for expr, bad in run["benchmark_failed"].items()
                ),
                flush=True,
            )
    print(f"\nbase width {args.base_width}, widths {widths}, {args.runs} sessions per cell, "
          f"{time.perf_counter() - started:.0f} s in all")  # fmt: skip
    header = f"{'cell':10} {'ours':>8} " + " ".join(f"{e:>12}" for e in BENCHMARK_CHECKS)
    print(header)
    rates: dict[str, float] = {}
    for name, _ in CELLS:
        runs = [s for s in sessions if s["cell"] == name]
        ours = sum(s["failed"] for s in runs)
        rates[name] = ours / len(runs)
        theirs = [sum(s["benchmark_failed"][e] for s in runs) for e in BENCHMARK_CHECKS]
        print(
            f"{name:10} {ours:>3}/{len(runs):<4} "
            + " ".join(f"{t:>7}/{len(runs):<4}" for t in theirs)
        )
    met = rates["unchanged"] == 0 and rates["+10 %"] >= 0.95 and rates["+5 %"] >= 0.75
    print(
        "targets (0 false alarms, ≥95 % caught at +10 %, ≥75 % at +5 %): "
        + ("met" if met else "NOT met")
    )
    if args.out:
        args.out.write_text(json.dumps({"base": base, "sessions": sessions}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
