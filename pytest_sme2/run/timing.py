"""The timing rounds of a measurement where the device's time is judged, and how much other work
took the CPU from them (the disturbance).

Latency comes from timing-only runs (no event tracer: tracing costs 3–10 %), interleaved by round
so slow drift of the machine (thermals, a neighbour's build) hits SME2-on and SME2-off alike; the
order alternates inside rounds (on, off, off, on, …) so neither variant always goes first. The
reference workload, timed in every round too, gives the machine's speed of the moment.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.run.case_runs import CaseRuns
from pytest_sme2.run.devices.base import Device, DeviceInfo, Variant
from pytest_sme2.run.disturbance import Disturbance, MachineLoad, Series, local_load, series
from pytest_sme2.runner.invoke import RunResult


@dataclass(frozen=True)
class Timing:
    """What the timing rounds ran: each variant's timing-only runs, and the reference workload's,
    one per round."""

    runs: Mapping[Variant, tuple[RunResult, ...]]
    reference: tuple[RunResult, ...] = ()

    @property
    def reference_ms(self) -> tuple[float, ...]:
        """The reference workload's latencies, every round's."""
        return tuple(ms for run in self.reference for ms in run.latencies_ms)


def timing_rounds(runs: CaseRuns, reference: tuple[Path, Path] | None) -> Timing:
    """Every variant's timing-only runs, round by round, the order reversed every other round;
    ``reference`` (a .pte and its inputs) timed after the variants of each round."""
    variants = runs.info.variants
    timed: dict[Variant, list[RunResult]] = {v: [] for v in variants}
    reference_runs: list[RunResult] = []
    for index, count in enumerate(runs.plan.runs_per_round()):
        order = variants if index % 2 == 0 else tuple(reversed(variants))
        plan = runs.run_plan(count, warmup=runs.plan.warmup, traced=False)
        for variant in order:
            timed[variant].append(runs.timed(variant, plan, f"{variant}-round{index}"))
        if reference is not None:
            with runs.step(variants[-1], "reference workload"):
                reference_runs.append(
                    runs.device.run(
                        *reference, variants[-1], plan, runs.workdir / f"reference-round{index}"
                    )
                )
    return Timing({v: tuple(found) for v, found in timed.items()}, tuple(reference_runs))


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
    :mod:`pytest_sme2.run.disturbance`): every variant's timing and traced runs, and the reference
    workload's; ``load`` is the machine's CPU load over the measurement (:func:`machine_load`)."""
    found = [_series(f"{variant} timing", runs) for variant, runs in timing.runs.items()]
    found += [_series(f"{variant} traced", [run]) for variant, run in traced.items()]
    found.append(_series("reference workload", timing.reference))
    return Disturbance(
        series=tuple(s for s in found if s is not None), load=load[0] if load else None
    )


def _series(what: str, runs: Sequence[RunResult]) -> Series | None:
    """The :class:`pytest_sme2.run.disturbance.Series` of ``runs``' measured executions."""
    return series(
        what,
        [p for run in runs for p in run.preemptions],
        [ms for run in runs for ms in run.latencies_ms],
        [ms for run in runs for ms in run.cpu_ms],
    )
