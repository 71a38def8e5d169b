"""Print what starting one process costs a session: through the compiled parent-death guard,
and through Python's ``preexec_fn`` (what a machine without a C compiler falls back to).

Why: a host session starts ~20 runner processes a case, from a process that has imported torch
and ExecuTorch; a ``preexec_fn`` makes subprocess fork all of that where it could vfork. Both
ways are timed in this one process, interleaved, after the same imports a session makes. Run
with ``python benchmarks/process_start.py [--starts N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_sme2.runner import dies_with_parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=100, help="processes started each way")
    args = parser.parse_args()

    import executorch.exir  # noqa: F401  (a session's address space: torch, ExecuTorch)
    import torch  # noqa: F401

    times: dict[str, list[float]] = {"compiled guard": [], "preexec_fn": []}
    with tempfile.TemporaryDirectory(prefix="sme2-start-bench-") as cache:
        os.environ["SME2_CACHE_DIR"] = cache
        ways = {
            "compiled guard": dies_with_parent.guarded(["true"]),
            "preexec_fn": (["true"], dies_with_parent._armed_in_child()),
        }
        for _ in range(args.starts):
            for name, (command, preexec) in ways.items():
                started = time.perf_counter()
                subprocess.run(command, preexec_fn=preexec, start_new_session=True, check=True)
                times[name].append(time.perf_counter() - started)
    for name, seconds in times.items():
        print(
            f"{name:>15}: {statistics.median(seconds) * 1000:6.1f} ms a process "
            f"(median of {len(seconds)})"
        )
    ratio = statistics.median(times["preexec_fn"]) / statistics.median(times["compiled guard"])
    print(f"preexec_fn / compiled guard: {ratio:.1f}x")


if __name__ == "__main__":
    main()
