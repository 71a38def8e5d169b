"""Run one exported model on a device, every variant it supports → a Measurement.

Latency comes from timing-only runs (no event tracer: tracing costs 3–10 %), interleaved by round
so slow drift of the machine (thermals, a neighbour's build) hits SME2-on and SME2-off alike; the
order alternates inside rounds (on, off, off, on, …) so neither variant always goes first.
Categories and operators come from one traced run per variant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.analysis import Comparison, Profile, compare, profile
from pytest_sme2.categories import Classifier
from pytest_sme2.devices.base import Device, DeviceInfo, Variant
from pytest_sme2.errors import ConfigError
from pytest_sme2.runner.invoke import RunPlan, RunResult
from pytest_sme2.trace import Trace, read_etdump


@dataclass(frozen=True)
class MeasurePlan:
    """How much to measure. ``runs`` timing-only runs per variant are split over ``rounds``."""

    runs: int = 20
    warmup: int = 2
    threads: int = 1
    rounds: int = 4
    traced_runs: int = 5

    def __post_init__(self) -> None:
        for name in ("runs", "rounds", "traced_runs", "threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--sme2-{name.replace('_', '-')} must be ≥ 1")
        if self.warmup < 0:
            raise ConfigError("--sme2-warmup must be ≥ 0")

    def runs_per_round(self) -> list[int]:
        """Split ``runs`` over at most ``rounds`` rounds, as evenly as possible."""
        rounds = min(self.rounds, self.runs)
        base, extra = divmod(self.runs, rounds)
        return [base + (1 if i < extra else 0) for i in range(rounds)]


@dataclass(frozen=True)
class VariantMeasurement:
    """One variant's timing-only latencies and its traced run, analysed."""

    variant: Variant
    latencies_ms: tuple[float, ...]
    trace: Trace
    profile: Profile
    traced: RunResult
    timing_runs: tuple[RunResult, ...]


@dataclass(frozen=True)
class Measurement:
    """Everything measured for one model × dtype × threads on one device."""

    model: str
    dtype: str
    threads: int
    device: DeviceInfo
    variants: Mapping[Variant, VariantMeasurement]
    interleaved: bool

    @property
    def comparison(self) -> Comparison | None:
        """SME2-off vs SME2-on, when the device ran both."""
        if Variant.ON not in self.variants or Variant.OFF not in self.variants:
            return None
        on, off = self.variants[Variant.ON], self.variants[Variant.OFF]
        return compare(
            on.profile,
            off.profile,
            on_latencies_ms=on.latencies_ms,
            off_latencies_ms=off.latencies_ms,
            interleaved=self.interleaved,
        )


def measure(
    device: Device,
    *,
    model: str,
    dtype: str,
    pte: Path,
    inputs: Path,
    plan: MeasurePlan,
    workdir: Path,
    classifier: Classifier | None = None,
) -> Measurement:
    """Run every variant ``device`` supports: interleaved timing rounds, then one traced run
    each."""
    info = device.info()
    variants = info.variants
    timing: dict[Variant, list[RunResult]] = {v: [] for v in variants}
    for index, runs in enumerate(plan.runs_per_round()):
        order = variants if index % 2 == 0 else tuple(reversed(variants))
        for variant in order:
            run_plan = RunPlan(runs=runs, warmup=plan.warmup, threads=plan.threads, traced=False)
            result = device.run(pte, inputs, variant, run_plan, workdir / f"{variant}-round{index}")
            timing[variant].append(result)
    measured: dict[Variant, VariantMeasurement] = {}
    for variant in variants:
        traced_plan = RunPlan(
            runs=plan.traced_runs, warmup=plan.warmup, threads=plan.threads, traced=True
        )
        traced = device.run(pte, inputs, variant, traced_plan, workdir / f"{variant}-traced")
        assert traced.etdump is not None, "a traced run always writes an ETDump"
        trace = read_etdump(traced.etdump)
        measured[variant] = VariantMeasurement(
            variant=variant,
            latencies_ms=tuple(ms for r in timing[variant] for ms in r.latencies_ms),
            trace=trace,
            profile=profile(trace, warmup=traced.warmup, classifier=classifier),
            traced=traced,
            timing_runs=tuple(timing[variant]),
        )
    return Measurement(
        model=model,
        dtype=dtype,
        threads=plan.threads,
        device=device.info(),
        variants=measured,
        interleaved=len(variants) > 1,
    )
