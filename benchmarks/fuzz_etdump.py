"""Structured fuzzing of the ETDump reader: 10,000 mutated real ETDumps (tests/etdump_fuzz.py).

Each mutation changes what the reader follows (offsets aliased or pointed elsewhere, vector and
string lengths, vtable slots, a table's vtable offset, event times) in one of the real fixtures
under tests/data; each file must parse or fail with a one-line TraceError. Prints how many did
which, per mutation, then the slowest and total parse time. Anything else is raised: a bug.

    python benchmarks/fuzz_etdump.py [--count 10000] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from etdump_fuzz import fuzz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    outcome = fuzz(args.count, args.seed)
    wall = time.perf_counter() - start
    answers: Counter[str] = Counter()
    for key, count in sorted(outcome.counts.items(), key=lambda item: -item[1]):
        answer, mutations = key.split(" <- ")
        answers[answer] += count
        print(f"{count:6d}  {mutations:40s} {answer}")
    print()
    for answer, count in answers.most_common():
        print(f"{count:6d}  {answer}")
    print(
        f"{args.count} mutated ETDumps: {answers['parsed']} parsed, "
        f"{args.count - answers['parsed']} TraceError, 0 other errors; slowest parse "
        f"{outcome.slowest_s * 1000:.1f} ms, parsing {outcome.total_s:.1f} s, wall {wall:.1f} s"
    )


if __name__ == "__main__":
    main()
