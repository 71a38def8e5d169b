"""Whether a busy machine disturbed a timing measurement; time is then not judged, and not
recorded.

Why: on a 2-core CI runner shared with other jobs (load 3–7), the fastest of 20 runs of a 5–9 ms
model is no longer an undisturbed run — every run is cut into time slices — and a ~0.1 ms
reference workload, rarely preempted, does not slow with it. Judged against a baseline taken the
same way, 2–6 of 10 unchanged sessions failed (issue 27). No statistic of wall-clock samples
recovers an undisturbed time from runs that all lost the CPU, so the measurement says it was
disturbed instead, from evidence it reads directly:

* the runner counts each execution's involuntary context switches (``preemptions`` in its
  timings, on the executing thread): a run that lost the CPU to another runnable thread;
* on a machine whose counters can be read, the mean number of runnable threads while measuring
  (``/proc/stat``'s ``procs_running``, sampled) and the CPU time the hypervisor stole.

A neighbour that only shares the caches and memory bandwidth (a process on the other core)
preempts nothing and leaves fewer runnable threads than cores: the reference workload beside the
model handles it (``baseline.LatencyBaseline.change_from``), as ``benchmarks/gating_quality.py``
measures. The thread CPU time the runner also reports is kept for that benchmark: it is not
judged, because a preempted run's CPU time still carries the cold caches each switch leaves.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: The share of a series' runs that may lose the CPU before its times are not judged. Quiet, the
#: runs of this project's measurements lost it in none of ~2,000 runs here; with a neighbour on
#: the other core, in none; with 3+ runnable threads on 2 cores, in nearly all of a 5 ms model's.
MAX_PREEMPTED_SHARE = 0.25
#: The CPU time the hypervisor may steal while measuring, in percent: stolen time is a preemption
#: no context switch inside the guest shows.
MAX_STEAL_PERCENT = 2.0
#: How often the machine's runnable threads are sampled while measuring.
SAMPLE_INTERVAL_S = 0.05
PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class Series:
    """One series of timed executions (a variant's timing or traced runs, the reference
    workload's) and how many of them lost the CPU to another thread."""

    what: str
    runs: int
    preempted: int

    @property
    def share(self) -> float:
        return self.preempted / self.runs if self.runs else 0.0


@dataclass(frozen=True)
class MachineLoad:
    """What the machine was doing while a measurement ran, where that can be read."""

    cores: int
    #: mean threads runnable (running or waiting for a CPU), the measurement's own included;
    #: None where the system does not say (then ``load_average`` may)
    runnable: float | None = None
    #: the 1-minute load average at the end (macOS, where nothing finer is readable)
    load_average: float | None = None
    #: CPU time stolen by the hypervisor, percent of the machine's time while measuring
    steal_percent: float | None = None

    def oversubscribed(self) -> bool:
        """More threads wanted a CPU than there are CPUs: someone waited, ours or not."""
        return self.runnable is not None and self.runnable > self.cores + 0.5

    def describe(self) -> str:
        if self.runnable is not None:
            text = f"{self.runnable:.1f} runnable threads on {self.cores} cores"
        elif self.load_average is not None:
            text = f"load average {self.load_average:.1f} on {self.cores} cores"
        else:
            return "the machine's load unknown"
        if self.steal_percent:
            text += f", {self.steal_percent:.1f}% of CPU time stolen by the hypervisor"
        return text + " during the measurement"


@dataclass(frozen=True)
class Disturbance:
    """How undisturbed a measurement's timed runs were: judged by :attr:`reason`."""

    series: tuple[Series, ...]
    load: MachineLoad | None = None

    @property
    def reason(self) -> str | None:
        """Why the measurement's times cannot be judged (a sentence), None when they can.

        Time is refused when a series lost the CPU in more than :data:`MAX_PREEMPTED_SHARE` of
        its runs, when more threads were runnable than there are cores, or when the hypervisor
        stole more than :data:`MAX_STEAL_PERCENT` of the time: each makes the fastest run a
        disturbed one, in the record and the session alike.
        """
        worst = max(self.series, key=lambda s: s.share, default=None)
        load = self.load
        preempted = worst is not None and worst.share > MAX_PREEMPTED_SHARE
        stolen = load is not None and (load.steal_percent or 0.0) > MAX_STEAL_PERCENT
        if not (preempted or stolen or (load is not None and load.oversubscribed())):
            return None
        machine = load.describe() if load is not None else "the machine's load unknown"
        if worst is not None and worst.preempted:
            return (
                f"{worst.preempted} of {worst.runs} {worst.what} runs lost the CPU to other work "
                f"({machine})"
            )
        return machine

    def to_json(self) -> dict[str, Any]:
        return {
            "series": [asdict(s) for s in self.series],
            "load": None if self.load is None else asdict(self.load),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Disturbance:
        load = data.get("load")
        return cls(
            series=tuple(Series(**s) for s in data["series"]),
            load=None if load is None else MachineLoad(**load),
        )


def series(what: str, preemptions: Sequence[int]) -> Series | None:
    """A :class:`Series` of runs' preemption counts; None where the runner reported none."""
    if not preemptions:
        return None
    return Series(what, len(preemptions), sum(1 for p in preemptions if p > 0))


@dataclass(frozen=True)
class _CpuCounters:
    """One read of ``/proc/stat``: runnable threads now, stolen and total CPU jiffies so far."""

    runnable: int
    steal: int
    total: int


def _read_proc_stat(path: Path = PROC_STAT) -> _CpuCounters | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    running, cpu = None, None
    for line in text.splitlines():
        if line.startswith("cpu "):
            cpu = [int(v) for v in line.split()[1:]]
        elif line.startswith("procs_running "):
            running = int(line.split()[1])
    if running is None or cpu is None:
        return None
    # user nice system idle iowait irq softirq steal (guest times are inside user already)
    steal = cpu[7] if len(cpu) > 7 else 0
    return _CpuCounters(runnable=running, steal=steal, total=sum(cpu[:8]))


@contextmanager
def local_load() -> Iterator[list[MachineLoad]]:
    """Sample this machine's load while the ``with`` body measures; the one-element list it
    yields holds the :class:`MachineLoad` afterwards (empty where nothing can be read).

    Linux (and WSL, a container): ``/proc/stat`` every :data:`SAMPLE_INTERVAL_S` on a thread
    (a few microseconds a read; the thread itself is running at each read and is not counted).
    macOS: the 1-minute load average at the end, the finest the system offers without privileges.
    """
    cores = os.cpu_count() or 1
    found: list[MachineLoad] = []
    first = _read_proc_stat()
    if first is None:
        yield found
        if hasattr(os, "getloadavg"):
            found.append(MachineLoad(cores=cores, load_average=os.getloadavg()[0]))
        return
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(SAMPLE_INTERVAL_S):
            counters = _read_proc_stat()
            if counters is not None:
                samples.append(counters.runnable - 1)

    sampler = threading.Thread(target=sample, name="sme2-load", daemon=True)
    sampler.start()
    try:
        yield found
    finally:
        stop.set()
        sampler.join()
    last = _read_proc_stat() or first
    samples.append(last.runnable - 1)  # a measurement shorter than one interval has this one
    elapsed = last.total - first.total
    found.append(
        MachineLoad(
            cores=cores,
            runnable=round(sum(samples) / len(samples), 2),
            steal_percent=round(100 * (last.steal - first.steal) / elapsed, 2) if elapsed else None,
        )
    )
