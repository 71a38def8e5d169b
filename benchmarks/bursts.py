"""The noisy neighbours of ``benchmarks/gating_quality.py``'s conditions: bursts of work that
come and go beside the sessions.

``bursty-cpu`` and ``bursty-memory``: one worker process per CPU, each busy and idle by turns at
random. Every worker alternates OFF (sleeping) for a random 1–3 s and ON for a random 1–4 s, its
own random sequence, so the workers drift in and out of step: at any moment none, one or all of
them are busy (on a 2-core host, both CPUs at times), as a CI runner's other jobs come and go.
Nothing is pinned: the workers and the sessions beside them share every CPU as the scheduler sees
fit.

- ``cpu``: ON is a tight loop of integer and float arithmetic on a few locals — it takes a CPU
  and little else (its working set fits in the first-level caches);
- ``memory``: ON copies a 64 MB array into another, over and over — memory bandwidth and the
  shared last-level cache, and a CPU too (a copy loop is as busy as any).

A worker appends one line per burst to the log (``<worker> on <start> <stop>``, wall-clock
seconds), one when it starts and one when it ends, so :func:`bursts_load` can say how much of the
time each worker was ON (its duty cycle; 2.5 s ON of every 4.5 s on average: ≈ 0.56) and how
many CPUs the workers kept busy on average. A worker ends when it is terminated (the series is
over), after its ``seconds`` at the latest, or within a burst's length once the process that
started it is gone.

``neighbour``: one process pinned to the last CPU (the sessions pinned to the others) that pauses
1–8 s and streams the same 64 MB copies for 0.5–3 s, by turns, ending the same ways.

    python benchmarks/bursts.py --worker KIND SECONDS LOG INDEX   (started by bursts_running)
    python benchmarks/bursts.py --neighbour-process CPU SECONDS LOG   (by neighbour_running)
"""

from __future__ import annotations

import math
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

KINDS = ("cpu", "memory")
#: How long a worker stays ON and OFF, each drawn afresh every time (seconds).
ON_S = (1.0, 4.0)
OFF_S = (1.0, 3.0)
#: The memory burst's arrays: far beyond any last-level cache, so every copy streams from DRAM.
#: A numpy copy rather than a torch matmul (e.g. 1500×1500, 2 threads): a copy is nearly no
#: arithmetic, all bandwidth and cache eviction, where a matmul is cache-blocked (its tiles reused
#: from L2) and mostly arithmetic — a CPU load much like ``cpu``'s, and its two threads per worker
#: would take two CPUs each. With the copy, ``bursty-memory`` differs from ``bursty-cpu`` in the
#: memory pressure alone, and from the ``neighbour`` condition (the same 64 MB copies) in being
#: bursty, unpinned and on every CPU.
ARRAY_MB = 64


def _cpu_step() -> None:
    """~1–2 ms of the interpreter's integer and float arithmetic on two locals."""
    x, y = 1, 1.0
    for _ in range(20_000):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        y = y * 0.999999 + 1e-6


def _memory_step() -> Callable[[], None]:
    """One 64 MB copy (~10–30 ms) per call, its arrays allocated once."""
    import numpy as np

    source = np.ones(ARRAY_MB * 2**20 // 8)
    target = np.empty_like(source)
    return lambda: np.copyto(target, source)


def worker(kind: str, seconds: float, log: Path, index: int) -> None:
    """One worker (run as ``--worker``): OFF and ON by turns until terminated, ``seconds`` are
    up or its parent is gone; every burst appended to ``log``."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so the last burst is logged
    parent = os.getppid()
    rng = random.Random(f"{os.getpid()}-{index}-{time.time_ns()}")
    step = _memory_step() if kind == "memory" else _cpu_step
    ends = time.monotonic() + seconds

    def write(line: str) -> None:
        with log.open("a") as out:  # one short appended line: whole, beside the other workers'
            out.write(f"{index} {line}\n")

    def alive() -> bool:
        return time.monotonic() < ends and os.getppid() == parent

    write(f"start {time.time():.3f}")
    try:
        while alive():
            time.sleep(rng.uniform(*OFF_S))
            if not alive():
                break
            started, until = time.time(), time.monotonic() + rng.uniform(*ON_S)
            try:
                while time.monotonic() < until and alive():
                    step()
            finally:
                write(f"on {started:.3f} {time.time():.3f}")
    finally:
        write(f"end {time.time():.3f}")


@contextmanager
def bursts_running(kind: str | None, seconds: float, log: Path) -> Iterator[None]:
    """With ``kind`` (``cpu``/``memory``): one worker per CPU (``os.cpu_count()``), unpinned, for
    ``seconds`` at most; terminated on leaving. Without: nothing started."""
    if kind is None:
        yield
        return
    if kind not in KINDS:
        raise ValueError(f"unknown burst kind {kind!r} ({', '.join(KINDS)})")
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", kind, str(seconds), str(log), str(index)]
        )
        for index in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


def _read_log(log: Path) -> tuple[dict[str, list[float]], list[tuple[str, float, float]]]:
    """Each worker's life ([start, end], end NaN when it logged none) and every burst (worker,
    start, stop), from the log."""
    lives: dict[str, list[float]] = {}
    bursts: list[tuple[str, float, float]] = []
    for line in log.read_text().splitlines() if log.exists() else []:
        index, what, *times = line.split()
        if what == "on":
            bursts.append((index, float(times[0]), float(times[1])))
        elif what in ("start", "end"):
            lives.setdefault(index, [math.nan, math.nan])[what == "end"] = float(times[0])
    return lives, bursts


def bursts_load(log: Path) -> str:
    """How busy the workers were: bursts, their mean length, each worker's duty cycle (time ON
    over its life), the CPUs they kept busy on average and how often all were ON at once."""
    lives, bursts = _read_log(log)
    if not lives or not bursts:
        return "no bursts logged"
    for index, life in lives.items():
        if math.isnan(life[1]):  # no end logged (killed): its last burst's stop
            life[1] = max((stop for i, _, stop in bursts if i == index), default=life[0])
    duty = [
        sum(stop - start for i, start, stop in bursts if i == index) / max(end - start, 1e-9)
        for index, (start, end) in lives.items()
    ]
    span = max(end for _, end in lives.values()) - min(start for start, _ in lives.values())
    on = [stop - start for _, start, stop in bursts]
    both = _all_on([(start, stop) for _, start, stop in bursts], len(lives))
    return (
        f"{len(lives)} workers, {len(bursts)} bursts of {statistics.mean(on):.1f} s on average, "
        f"duty cycle {statistics.mean(duty):.2f} ({min(duty):.2f}–{max(duty):.2f}), "
        f"{sum(on) / max(span, 1e-9):.2f} CPUs busy on average, all ON "
        f"{100 * both / max(span, 1e-9):.0f} % of {span:.0f} s"
    )


def _all_on(bursts: list[tuple[float, float]], workers: int) -> float:
    """Seconds during which ``workers`` bursts overlapped (all workers ON at once)."""
    events = sorted([(start, 1) for start, _ in bursts] + [(stop, -1) for _, stop in bursts])
    total, running, since = 0.0, 0, 0.0
    for moment, step in events:
        if running >= workers:
            total += moment - since
        running, since = running + step, moment
    return total


# The ``neighbour`` condition's pinned neighbour: memory bursts (the same 64 MB copies) at random
# moments on the last CPU alone, the sessions pinned to the others.

#: The neighbour's bursts: how long it pauses between them and how long each lasts (seconds).
NEIGHBOUR_PAUSE_S = (1.0, 8.0)
NEIGHBOUR_BURST_S = (0.5, 3.0)


def neighbour(cpu: int, seconds: float, log: Path, seed: int) -> None:
    """The noisy neighbour (run as ``--neighbour-process``): on ``cpu`` only, for ``seconds`` at
    most and no longer than its parent lives, pauses and bursts of memory streaming at random
    moments; each burst is appended to ``log`` (start, seconds) so the run says how busy it was."""
    import numpy as np

    os.sched_setaffinity(0, {cpu})
    parent = os.getppid()
    rng = random.Random(seed)
    source = np.ones(ARRAY_MB * 2**20 // 8)
    target = np.empty_like(source)
    ends = time.monotonic() + seconds
    with log.open("a") as out:
        while time.monotonic() < ends and os.getppid() == parent:
            time.sleep(rng.uniform(*NEIGHBOUR_PAUSE_S))
            started, burst = time.monotonic(), rng.uniform(*NEIGHBOUR_BURST_S)
            while time.monotonic() - started < burst:
                np.copyto(target, source)
            out.write(f"{time.time():.1f} {time.monotonic() - started:.2f}\n")
            out.flush()


@contextmanager
def neighbour_running(on: bool, seconds: float, log: Path) -> Iterator[set[int] | None]:
    """With ``on``: the neighbour started on the last CPU, and the CPUs the sessions get (the
    others); stopped on leaving. Without: nothing started, sessions on any CPU (None)."""
    if not on:
        yield None
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        sys.exit("the neighbour condition needs two CPUs: one for it, one for the sessions")
    command = [
        sys.executable, __file__, "--neighbour-process", str(cpus[-1]), str(seconds), str(log),
    ]  # fmt: skip
    process = subprocess.Popen(command)
    try:
        yield set(cpus[:-1])
    finally:
        process.terminate()
        process.wait(timeout=30)


def neighbour_load(log: Path, seconds: float) -> str:
    """How busy the neighbour was: bursts, their total and their share of ``seconds``."""
    bursts = (
        [float(line.split()[1]) for line in log.read_text().splitlines()] if log.exists() else []
    )
    busy = sum(bursts)
    return (
        f"{len(bursts)} bursts, {busy:.0f} s busy of {seconds:.0f} s ({100 * busy / seconds:.0f} %)"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--neighbour-process"] and len(sys.argv) == 5:
        cpu, seconds, log = sys.argv[2:5]
        neighbour(int(cpu), float(seconds), Path(log), seed=os.getpid())
        sys.exit(0)
    if sys.argv[1:2] != ["--worker"] or len(sys.argv) != 6:
        sys.exit(__doc__.rsplit("\n\n", 1)[-1])
    kind, seconds, log, index = sys.argv[2:6]
    worker(kind, float(seconds), Path(log), int(index))
