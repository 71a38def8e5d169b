"""Print how long the native runner takes to build cold and to look up warm.

Why: every fresh machine (CI, a new developer) pays the cold build once, and every test session
pays the warm lookup (hashing sources and the wheel, asking the compiler its version). Run with
``python benchmarks/runner_build.py [--target aarch64 --executorch-dir DIR] [--lookups N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_sme2.runner.build import build_runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="host", choices=["host", "aarch64"])
    parser.add_argument("--executorch-dir", type=Path, default=None)
    parser.add_argument("--lookups", type=int, default=20, help="warm lookups to time")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sme2-runner-bench-") as cache:
        os.environ["SME2_CACHE_DIR"] = cache  # a cold cache, thrown away afterwards
        start = time.perf_counter()
        binary = build_runner(args.target, executorch_dir=args.executorch_dir)
        cold = time.perf_counter() - start
        warm = []
        for _ in range(args.lookups):
            start = time.perf_counter()
            build_runner(args.target, executorch_dir=args.executorch_dir)
            warm.append(time.perf_counter() - start)
        print(f"runner target:      {args.target}")
        print(f"cold build:         {cold:.2f} s  ({binary.stat().st_size / 1024:.0f} KiB binary)")
        print(
            f"warm lookup:        median {statistics.median(warm) * 1000:.1f} ms, "
            f"max {max(warm) * 1000:.1f} ms over {len(warm)} calls"
        )


if __name__ == "__main__":
    main()
