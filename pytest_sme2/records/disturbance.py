"""How undisturbed a measurement's timed runs were (:class:`Disturbance`): the series of runs
that lost the CPU and the machine's CPU load around them, and the rule that refuses their time
(:attr:`Disturbance.reason`). The measuring side that reads it, :mod:`pytest_sme2.measure.cpu_load`,
says why a busy machine is told this way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: The share of a series' runs that may lose the CPU before its times are not judged. A few runs
#: lose it on a quiet machine too (2 of 20 runs of a 23 ms model pinned to one CPU here: a
#: kernel thread, the session's own); on a machine with more runnable threads than cores, nearly
#: every run of a model over a few milliseconds does.
MAX_PREEMPTED_SHARE = 0.25
#: The CPU time the hypervisor may steal while measuring, in percent: stolen time is a preemption
#: no context switch inside the guest shows.
MAX_STEAL_PERCENT = 2.0
#: The share of the measurement's wall time in which some thread may wait for a CPU (Linux
#: pressure stall information) before the machine counts as oversubscribed. Sessions pinned to
#: one core beside a neighbour pinned to the other waited 3–9 % of the time here (their own
#: threads and the kernel's share the core); with more runnable threads than cores, some thread
#: waits most of the time.
MAX_WAITING_PERCENT = 20.0


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
    #: percent of the measurement's wall time in which some runnable thread waited for a CPU
    #: (Linux pressure stall information, ``/proc/pressure/cpu``); None where not available
    waiting_percent: float | None = None
    #: the 1-minute load average at the end (all a macOS offers without privileges)
    load_average: float | None = None
    #: CPU time stolen by the hypervisor, percent of the machine's time while measuring
    steal_percent: float | None = None

    def oversubscribed(self) -> bool:
        """Threads waited for a CPU for a noticeable share of the measurement: more wanted to
        run than there were CPUs, ours or not."""
        return self.waiting_percent is not None and self.waiting_percent > MAX_WAITING_PERCENT

    def describe(self) -> str:
        parts = []
        if self.waiting_percent is not None:
            parts.append(f"threads waited for a CPU {self.waiting_percent:.0f}% of the time")
        if self.load_average is not None:
            parts.append(f"load average {self.load_average:.1f} on {self.cores} cores")
        if self.steal_percent:
            parts.append(f"{self.steal_percent:.1f}% of CPU time stolen by the hypervisor")
        if not parts:
            return "the machine's load unknown"
        return ", ".join(parts) + " during the measurement"


@dataclass(frozen=True)
class Disturbance:
    """How undisturbed a measurement's timed runs were: judged by :attr:`reason`."""

    series: tuple[Series, ...]
    load: MachineLoad | None = None

    @property
    def reason(self) -> str | None:
        """Why the measurement's times cannot be judged (a sentence), None when they can.

        Time is refused when a series lost the CPU in more than :data:`MAX_PREEMPTED_SHARE` of
        its runs, when threads waited for a CPU more than :data:`MAX_WAITING_PERCENT` of the
        time, or when the hypervisor stole more than :data:`MAX_STEAL_PERCENT` of it: each makes
        the fastest run a disturbed one, in the record and the session alike.
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
