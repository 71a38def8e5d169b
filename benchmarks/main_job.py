"""Time the README's main job from a fresh clone, cold and warm, and check what its report shows.

The main job is the README's one line after ``scripts/install.sh`` (packages installed already):
``python -m pytest tests/test_suite.py --html=report.html --self-contained-html`` on the default
device, ``auto``. Issue 49's targets, on 2 cores: ≤ 4 min cold (with the install, which this
script does not time), ≤ 30 s warm.

* **cold**: a fresh clone of this repository and an empty ``SME2_CACHE_DIR`` — every export,
  both runner builds, qemu-sme2's provisioning and every instruction count made in the run (the
  apt cross toolchain is per machine and not removed: ``provision_time.py --reinstall-apt``
  times it, 11 s);
* **warm**: the same clone and cache again — exports, builds and stored counts reused.

Each run's session table is read back for what a newcomer must see on a machine without SME2: a
qemu-sme2 row per example model with its instruction ratio (off ÷ on) and the SME2 kernels
SME2-on executed.

    python benchmarks/main_job.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAIN_JOB = (
    sys.executable, "-m", "pytest", "tests/test_suite.py",
    "--html=report.html", "--self-contained-html", "-p", "no:cacheprovider",
)  # fmt: skip
TARGETS_S = {"cold": 240.0, "warm": 30.0}
HEADER = ["model", "dtype", "device"]


def run_main_job(clone: Path, cache: Path) -> tuple[float, str, int]:
    """The main job in ``clone`` with ``cache``: seconds, stdout, exit code."""
    env = {**os.environ, "SME2_CACHE_DIR": str(cache), "PYTHONPATH": str(clone)}
    env.pop("PYTEST_ADDOPTS", None)
    started = time.perf_counter()
    done = subprocess.run(MAIN_JOB, cwd=clone, env=env, capture_output=True, text=True)
    return time.perf_counter() - started, done.stdout, done.returncode


def emulated_rows(stdout: str) -> list[str]:
    """The session table's qemu-sme2 rows: the lines under its header (``model dtype device …``)
    up to the first that is not a row, whose third column is the device."""
    lines = stdout.split(" pytest-sme2 ==", 1)[-1].splitlines()
    start = next((i for i, line in enumerate(lines) if line.split()[:3] == HEADER), len(lines))
    rows = []
    for line in lines[start + 1 :]:
        cells = line.split()
        if len(cells) < 3 or line.startswith(("skipped gate", "pytest-sme2", "=")):
            break
        if cells[2] == "qemu-sme2":
            rows.append(line)
    return rows


def evidence_of(rows: list[str]) -> list[str]:
    """Per qemu-sme2 row: model, dtype, instruction ratio and SME2 kernels, as the table says."""
    found = []
    for row in rows:
        ratio = re.search(r"instruction ratio (\S+)", row)
        kernels = re.search(r"(\d+ ran|none)\s", row)
        cells = row.split()
        found.append(
            f"{cells[0]} {cells[1]}: instruction ratio {ratio.group(1) if ratio else '—'}, "
            f"SME2 kernels {kernels.group(1) if kernels else '—'}"
        )
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="keep the clone and cache here")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="sme2-main-job-"))
    clone, cache = work / "clone", work / "cache"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True
    ).stdout.strip()
    print(f"main job of {head} on {platform.machine()}, {os.cpu_count()} CPUs: {MAIN_JOB[2:]}")
    ok = True
    for kind in ("cold", "warm"):
        seconds, stdout, code = run_main_job(clone, cache)
        (work / f"{kind}.log").write_text(stdout)
        rows = emulated_rows(stdout)
        met = seconds <= TARGETS_S[kind]
        ok &= met and code == 0 and bool(rows)
        print(
            f"{kind}: {seconds:.0f} s (target ≤ {TARGETS_S[kind]:.0f} s: "
            f"{'met' if met else 'MISSED'}), exit {code}, {len(rows)} qemu-sme2 row(s)"
        )
        print("\n".join(f"    {line}" for line in evidence_of(rows)))
        summary = [line for line in stdout.splitlines() if re.match(r"=+ .* in [\d.]+s", line)]
        print(f"    {summary[-1] if summary else stdout[-2000:]}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
