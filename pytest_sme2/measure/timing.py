"""The timing rounds of a measurement where the device's time is judged, and how much other work
took the CPU from them (the disturbance).

Latency comes from timing-only runs (no event tracer: tracing costs 3–10 %), interleaved by round
so slow drift of the machine (thermals, a neighbour's build) hits SME2-on and SME2-off alike; the
order alternates inside rounds (on, off, off, on, …) so neither variant always goes first. The
reference workload, timed in every round too, gives the machine's speed of the moment. Where a
thread-gain floor asks for it (``MeasurePlan.with_one_thread``), each variant's N-thread call is
paired in its round with a 1-thread one, their order alternating too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pytest_sme2.devices.base import Device
from pytest_sme2.measure.case_runs import CaseRuns
from pytest_sme2.measure.cpu_load import local_load, series
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.disturbance import Disturbance, MachineLoad, Series
from pytest_sme2.runner.invoke import RunResult


@dataclass(frozen=True)
class Timing:
    """What the timing rounds ran: each variant's timing-only runs, and the reference workload's,
    one per round."""

    runs: Mapping[Variant, tuple[RunResult, ...]]
    reference: tuple[RunResult, ...] = ()
    #: each variant's 1-thread runs from the same rounds, where the plan asked for them
    one_thread: Mapping[Variant, tuple[RunResult, ...]] = field(default_factory=dict)

    @property
    def one_thread_ms(self) -> dict[Variant, tuple[float, ...]]:
        """Each variant's 1-thread latencies, every round's ({} where none were timed)."""
        return {
            variant: tuple(ms for run in runs for ms in run.latencies_ms)
            for variant, runs in self.one_thread.items()
        }

    @property
    def reference_ms(self) -> tuple[float, ...]:
        """The reference workload's latencies, every round's."""
        return tuple(ms for run in self.reference for ms in run.latencies_ms)


def timing_rounds(runs: CaseRuns, reference: tuple[Path, Path] | None) -> Timing:
    """Every variant's timing-only runs, round by round, the order reversed every other round;
    ``reference`` (a .pte and its inputs) timed after the variants of each round."""
    variants = runs.info.variants
    timed: dict[Variant, list[RunResult]] = {v: [] for v in variants}
    one: dict[Variant, list[RunResult]] = {v: [] for v in variants} if _pairs(runs) else {}
    reference_runs: list[RunResult] = []
    for index, count in enumerate(runs.plan.runs_per_round()):
        order = variants if index % 2 == 0 else tuple(reversed(variants))
        plan = runs.executions(count, warmup=runs.plan.warmup, traced=False)
        single = runs.executions(count, warmup=runs.plan.warmup, traced=False, threads=1)
        calls = [(plan, timed, ""), (single, one, "-t1")][: 2 if one else 1]
        for variant in order:
            for call, into, tag in calls if index % 2 == 0 else reversed(calls):
                into[variant].append(runs.timed(variant, call, f"{variant}{tag}-round{index}"))
        if reference is not None:
            request = runs.request(variants[-1], plan, f"reference-round{index}", reference)
            with runs.step(variants[-1], "reference workload"):
                reference_runs.append(runs.device.run(request))
    return Timing(
        {v: tuple(found) for v, found in timed.items()},
        tuple(reference_runs),
        {v: tuple(found) for v, found in one.items()},
    )


def _pairs(runs: CaseRuns) -> bool:
    """Whether each N-thread call is paired with a 1-thread one (a thread-gain floor's)."""
    return runs.plan.with_one_thread and runs.plan.threads > 1


@contextmanager
def machine_load(device: Device, info: DeviceInfo) -> Iterator[list[MachineLoad]]:
    """The machine's CPU load while ``device`` measures, where its time is judged and its load
    can be read (a local device); an empty list otherwise. Filled when the ``with`` ends."""
    if info.time_meaningful and device.runs_locally:
        with local_load() as found:
            yield found
    else:
        yield []


def disturbance(
    timing: Timing, traced: Mapping[Variant, RunResult], load: Sequence[MachineLoad]
) -> Disturbance:
    """How much other work took the CPU from the measurement's timed runs (see
    :mod:`pytest_sme2.measure.cpu_load`): every variant's timing and traced runs, and the reference
    workload's; ``load`` is the machine's CPU load over the measurement (:func:`machine_load`)."""
    found = [_series(f"{variant} timing", runs) for variant, runs in timing.runs.items()]
    found += [_series(f"{variant} 1-thread", runs) for variant, runs in timing.one_thread.items()]
    found += [_series(f"{variant} traced", [run]) for variant, run in traced.items()]
    found.append(_series("reference workload", timing.reference))
    return Disturbance(
        series=tuple(s for s in found if s is not None), load=load[0] if load else None
    )


def _series(what: str, runs: Sequence[RunResult]) -> Series | None:
    """The :class:`pytest_sme2.records.disturbance.Series` of ``runs``' measured executions."""
    return series(
        what,
        [p for run in runs for p in run.preemptions],
        [ms for run in runs for ms in run.latencies_ms],
        [ms for run in runs for ms in run.cpu_ms],
    )
