"""Run one exported model on a device, every variant it supports → a Measurement (the case
record, :mod:`pytest_sme2.run.measurement`).

Latency comes from timing-only runs (no event tracer: tracing costs 3–10 %), interleaved by round
so slow drift of the machine (thermals, a neighbour's build) hits SME2-on and SME2-off alike; the
order alternates inside rounds (on, off, off, on, …) so neither variant always goes first.
Categories and operators come from one traced run per variant; where time means nothing, that
run is the device's counted run (:meth:`~pytest_sme2.run.devices.base.Device.counted_run`), whose
instructions are the profile.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pytest_sme2 import progress
from pytest_sme2.analysis.categories import Classifier
from pytest_sme2.analysis.etrecord import delegate_backends
from pytest_sme2.analysis.numerics import (
    ExportNumerics,
    MismatchError,
    Numerics,
    Tolerance,
    compare_outputs,
    degenerate,
    tolerance_for,
)
from pytest_sme2.analysis.profile import INSTRUCTIONS, profile
from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.errors import ConfigError, DeviceLost, RunnerError, TraceError
from pytest_sme2.run.deadline import Deadline
from pytest_sme2.run.devices.base import (
    EVIDENCE_EXECUTIONS,
    Device,
    DeviceInfo,
    Sme2Evidence,
    Variant,
)
from pytest_sme2.run.disturbance import Disturbance, MachineLoad, Series, local_load, series
from pytest_sme2.run.measurement import LoadMeasurement, Measurement, VariantMeasurement
from pytest_sme2.run.modelled_etdump import write_modelled_etdump
from pytest_sme2.runner.invoke import RunPlan, RunResult
from pytest_sme2.runner.tensors import read_tensors

#: Seconds a measurement runs before it says which variant and step it is at: host cases take a
#: few seconds and stay silent; one emulated real architecture (EfficientNet-B0, 64 px) runs
#: over 10 minutes on qemu-sme2, which would otherwise pass without a word.
QUIET_S = 10.0


@dataclass(frozen=True)
class MeasurePlan:
    """How much to measure. ``runs`` timing-only runs per variant are split over ``rounds``."""

    runs: int = 20
    warmup: int = 2
    threads: int = 1
    rounds: int = 10
    traced_runs: int = 10
    #: every runner call's deadline in seconds (``--sme2-timeout``); None: from the baseline
    #: (:mod:`pytest_sme2.run.deadline`), else the device's default
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("runs", "rounds", "traced_runs", "threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--sme2-{name.replace('_', '-')} must be ≥ 1")
        if self.warmup < 0:
            raise ConfigError("--sme2-warmup must be ≥ 0")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ConfigError("--sme2-timeout must be > 0 seconds (or 0 for the default)")

    def runs_per_round(self) -> list[int]:
        """Split ``runs`` over at most ``rounds`` rounds, as evenly as possible."""
        rounds = min(self.rounds, self.runs)
        base, extra = divmod(self.runs, rounds)
        return [base + (1 if i < extra else 0) for i in range(rounds)]


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
    reference: tuple[Path, Path] | None = None,
    etrecord: Path | None = None,
    deadline: Deadline | None = None,
    expected_outputs: Path | None = None,
    numerics: ExportNumerics | None = None,
    tokens: int | None = None,
    parity_tolerance: Tolerance | None = None,
) -> Measurement:
    """Run every variant ``device`` supports: interleaved timing rounds, then one traced run
    each. ``reference`` (a .pte and its inputs) is timed in every round too, where the device's
    time is meaningful, so latency can be judged against the machine's speed of the moment.
    ``etrecord`` names the backend of delegated operators. ``deadline`` sets each runner call's
    deadline (default: ``plan.timeout_s``, else the device's). ``expected_outputs`` (the export's
    eager outputs) are what every variant's outputs must match in count and shape. ``numerics``
    (what the export found of the program's numbers) and ``tokens`` (per inference, for
    tokens/s) are carried into the record for the report. SME2-on outputs must match SME2-off
    within ``parity_tolerance`` (a registered program's), else the ``dtype`` label's. A
    measurement that takes over :data:`QUIET_S` says which variant and step it is at
    (:mod:`pytest_sme2.progress`): one real architecture emulates for many minutes."""
    info = device.info()
    with (
        progress.task(
            f"measure {model}[{dtype}] on {info.name}", remember=False, quiet_s=QUIET_S
        ) as running,
        _machine_load(device, info) as load,
    ):
        deadline = deadline or Deadline(plan.timeout_s)
        variants = info.variants
        backends = delegate_backends(etrecord) if etrecord is not None else None
        timing: dict[Variant, list[RunResult]] = {v: [] for v in variants}
        reference_ms: list[float] = []
        reference_runs: list[RunResult] = []
        traced_runs: dict[Variant, RunResult] = {}
        if info.time_meaningful:
            traced_plan = RunPlan(
                runs=plan.traced_runs,
                warmup=plan.warmup,
                threads=plan.threads,
                traced=True,
                timeout_s=deadline.seconds(plan.warmup + plan.traced_runs),
            )
            for index, runs in enumerate(plan.runs_per_round()):
                order = variants if index % 2 == 0 else tuple(reversed(variants))
                run_plan = RunPlan(
                    runs=runs,
                    warmup=plan.warmup,
                    threads=plan.threads,
                    traced=False,
                    timeout_s=deadline.seconds(plan.warmup + runs),
                )
                for variant in order:
                    workdir_round = workdir / f"{variant}-round{index}"
                    with _naming(info, variant, running=running, stage="timing"):
                        run = device.run(pte, inputs, variant, run_plan, workdir_round)
                    timing[variant].append(run)
                if reference is not None:
                    ref_dir = workdir / f"reference-round{index}"
                    with _naming(info, variants[-1], "reference workload", running=running):
                        ref = device.run(*reference, variants[-1], run_plan, ref_dir)
                    reference_ms.extend(ref.latencies_ms)
                    reference_runs.append(ref)
        else:
            # Emulated time means nothing, and each inference costs seconds: one traced run per
            # variant gives the operator names, structure and outputs, and the instruction counts
            # where the device counts them (its counted run); elsewhere the device's evidence run
            # gives them.
            traced_plan = RunPlan(
                runs=1, warmup=0, threads=plan.threads, traced=True, timeout_s=deadline.seconds(1)
            )
        expected = read_tensors(expected_outputs) if expected_outputs is not None else None
        measured: dict[Variant, VariantMeasurement] = {}
        for variant in variants:
            counted_run = None
            if not info.time_meaningful:
                with _naming(info, variant, running=running, stage="counted run"):
                    counted_run = device.counted_run(
                        pte,
                        inputs,
                        variant,
                        plan.threads,
                        workdir / f"{variant}-counted",
                        timeout_s=deadline.seconds(EVIDENCE_EXECUTIONS),
                    )
                    if counted_run is not None:
                        _check_outputs(counted_run.run, expected)
            if counted_run is not None:
                # where time means nothing, the profile is the counted inference's instructions
                traced, evidence = counted_run
                assert evidence.instruction_trace is not None, "a counted run is traced"
                variant_profile = profile(
                    evidence.instruction_trace,
                    classifier=classifier,
                    backends=backends,
                    unit=INSTRUCTIONS,
                )
            else:
                with _naming(info, variant, running=running, stage="traced run"):
                    traced = device.run(
                        pte, inputs, variant, traced_plan, workdir / f"{variant}-traced"
                    )
                    assert traced.etdump is not None, "a traced run always writes an ETDump"
                    traced_runs[variant] = traced
                    trace = read_etdump(traced.etdump)
                    _check_outputs(traced, expected)
                variant_profile = profile(
                    trace, warmup=traced.warmup, classifier=classifier, backends=backends
                )
                with _naming(info, variant, "evidence run", running=running):
                    evidence = device.evidence(
                        pte,
                        inputs,
                        variant,
                        plan.threads,
                        workdir / f"{variant}-evidence",
                        timeout_s=deadline.seconds(EVIDENCE_EXECUTIONS),
                    )
            counted = evidence.instruction_trace if evidence and not info.time_meaningful else None
            # the kit re-reads an ETDump's times: give it the counted inference's, in instructions
            modelled = write_modelled_etdump(counted) if counted is not None else None
            timed = timing[variant]
            measured[variant] = VariantMeasurement(
                variant=variant,
                latencies_ms=tuple(ms for r in timed for ms in r.latencies_ms)
                or traced.latencies_ms,
                timing_warmup=timed[0].warmup if timed else None,
                profile=variant_profile,
                etdump=traced.etdump,
                outputs=traced.outputs,
                evidence=replace(evidence, instruction_trace=None) if evidence else None,
                load=load_measurement(timed or [traced], evidence, timed=info.time_meaningful),
                modelled_etdump=modelled,
            )
    return Measurement(
        parity=_parity(measured, model, dtype, parity_tolerance or tolerance_for(dtype)),
        numerics=numerics,
        reference_ms=tuple(reference_ms),
        model=model,
        dtype=dtype,
        threads=plan.threads,
        device=info,
        variants=measured,
        interleaved=len(variants) > 1,
        overrides=dict(classifier.overrides) if classifier is not None else {},
        tokens=tokens,
        disturbance=_disturbance(timing, traced_runs, reference_runs, load)
        if info.time_meaningful
        else None,
    )


@contextmanager
def _machine_load(device: Device, info: DeviceInfo) -> Iterator[list[MachineLoad]]:
    """The machine's load while ``device`` measures, where its time is judged and its load can
    be read (a local device); an empty list otherwise."""
    if info.time_meaningful and device.runs_locally:
        with local_load() as found:
            yield found
    else:
        yield []


def _disturbance(
    timing: Mapping[Variant, Sequence[RunResult]],
    traced: Mapping[Variant, RunResult],
    reference: Sequence[RunResult],
    load: Sequence[MachineLoad],
) -> Disturbance:
    """How much other work took the CPU from the measurement's timed runs (see
    :mod:`pytest_sme2.run.disturbance`): every variant's timing and traced runs, and the reference
    workload's."""
    found = [_series(f"{variant} timing", timing[variant]) for variant in timing]
    found += [_series(f"{variant} traced", [run]) for variant, run in traced.items()]
    found.append(_series("reference workload", reference))
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


def load_measurement(
    runs: Sequence[RunResult], evidence: Sme2Evidence | None, *, timed: bool
) -> LoadMeasurement | None:
    """One variant's load cost and memory from its runner processes: the fastest program load
    and method init (a busy neighbour only slows them), the largest peak resident memory; where
    time means nothing, neither (qemu's resident memory is its own), and init in instructions
    from the evidence (the counted run's, under emulation)."""
    loads = [run.load for run in runs if run.load is not None]
    if not loads:
        return None
    return LoadMeasurement(
        planned_bytes=loads[0].planned_bytes,
        peak_rss_bytes=_largest(load.peak_rss_bytes for load in loads) if timed else None,
        program_load_ms=min(load.program_load_ms for load in loads) if timed else None,
        method_init_ms=min(load.method_init_ms for load in loads) if timed else None,
        init_instructions=evidence.init_instructions if evidence else None,
    )


def _largest(values: Iterable[int | None]) -> int | None:
    """The largest of the values a runner could give (a peak memory it could not read is None)."""
    known = [value for value in values if value is not None]
    return max(known) if known else None


@contextmanager
def _naming(
    info: DeviceInfo, variant: Variant, what: str = "", *, running: progress.Task, stage: str = ""
) -> Iterator[None]:
    """Prefix a failed run's error with the device and the variant (and what ran), so the one
    line a test fails with says where it happened; ``running`` shows the step (``stage``, else
    ``what``) while it runs."""
    running.stage(f"{variant} {stage or what}")
    try:
        yield
    except (RunnerError, TraceError) as err:
        where = f"{info.name} ({variant}{', ' + what if what else ''})"
        kind = DeviceLost if isinstance(err, DeviceLost) else RunnerError
        raise kind(f"{where}: {err}") from err


def _check_outputs(run: RunResult, expected: Sequence[np.ndarray] | None) -> None:
    """RunnerError unless the run's outputs have the program's count and shapes (``expected``'s;
    None: nothing to check against).

    A runtime that returns the wrong tensors (a broken build, a truncated output file) would
    otherwise pass every gate, which judge time and structure only; on a device that runs one
    variant, there is no SME2-off to compare with either. Values are judged where the program
    is exported (against eager PyTorch) and, where both variants run, by their parity.
    """
    if expected is None or run.outputs is None:
        return
    try:
        compare_outputs(read_tensors(run.outputs), expected, what="eager PyTorch")
    except MismatchError as err:
        raise RunnerError(f"{run.outputs}: the outputs do not fit the program: {err}") from None


def _parity(
    measured: Mapping[Variant, VariantMeasurement], model: str, dtype: str, tolerance: Tolerance
) -> Numerics | None:
    """SME2-on outputs judged against SME2-off outputs within ``tolerance``.

    The same program on the same inputs must compute the same thing whichever kernels ran; a
    broken SME2 kernel would show here even where eager PyTorch is not at hand. Vacuous when
    the SME2-off outputs are degenerate (all zero, denormal, constant, non-finite): any kernel
    matches those.
    """
    runs = [measured[v].outputs if v in measured else None for v in (Variant.ON, Variant.OFF)]
    if None in runs:
        return None
    on, off = (read_tensors(path) for path in runs)
    try:
        errors = compare_outputs(on, off, what="SME2-off")
    except MismatchError as err:
        raise RunnerError(
            f"SME2-on and SME2-off outputs of {model}[{dtype}] differ: {err}"
        ) from None
    return Numerics.judge(errors, tolerance, reference=str(Variant.OFF), vacuous=degenerate(off))


def fastest(*measurements: Measurement) -> Measurement:
    """The measurement taken while the machine was fastest: a time gate's failure is confirmed
    on it, so a slow spell of one measurement does not fail a test while a regression, present
    in both, still does.

    Only undisturbed measurements compete where there are any (:mod:`pytest_sme2.run.disturbance`):
    one whose runs lost the CPU can neither confirm nor clear a failure. Among them, the
    machine's speed is the reference workload's fastest run where every measurement timed it: a
    neighbour's burst slows the reference and the model unevenly (by 15 % and 12 % in one
    session here), so the one least disturbed is the one to trust. Elsewhere, the least total of
    each variant's fastest run."""
    calm = [m for m in measurements if m.disturbance is None or m.disturbance.reason is None]
    measurements = tuple(calm) or measurements
    if all(m.reference_ms for m in measurements):
        return min(measurements, key=lambda m: min(m.reference_ms))
    return min(measurements, key=lambda m: sum(min(vm.latencies_ms) for vm in m.variants.values()))


#: How long :func:`settle` waits at most for the machine to return to its undisturbed speed. The
#: disturbances seen on shared CI machines (a neighbour's burst) last seconds to ~2 minutes.
SETTLE_TIMEOUT_S = 120.0
#: The pause between two probes of the machine's speed while it has not settled.
SETTLE_PAUSE_S = 5.0
#: Timing-only runs of the reference workload per probe (~0.15 ms each on the host).
SETTLE_PROBE_RUNS = 50
#: How close to its undisturbed speed the machine must be: the reference's fastest run within
#: 10 %. Undisturbed, it stayed within 7 % across sessions here; disturbed, it ran 20–26 % slower.
SETTLE_TOLERANCE = 0.10


@dataclass
class MachineSpeed:
    """The fastest the machine has run the reference workload this session: its undisturbed speed.

    Session state, updated after every measurement, hence not frozen. :func:`settle` waits for
    the faster of this and the baseline's own reference time: a baseline can have been recorded
    while the reference ran slow (one stored 0.196 ms against 0.137 ms undisturbed), and the
    session's first measurement can itself be disturbed.
    """

    best_ms: float | None = None

    def observe(self, measurement: Measurement) -> None:
        if measurement.reference_ms:
            fastest = min(measurement.reference_ms)
            self.best_ms = fastest if self.best_ms is None else min(self.best_ms, fastest)

    def undisturbed_ms(self, baseline_ms: float | None) -> float | None:
        """The reference time to settle back to, or None where nothing was timed."""
        known = [ms for ms in (self.best_ms, baseline_ms) if ms is not None]
        return min(known) if known else None


@dataclass(frozen=True)
class Settling:
    """How :func:`settle` ended: the reference workload's latency against its undisturbed one."""

    ratio: float  # reference's fastest run now ÷ undisturbed
    waited_s: float
    settled: bool

    def describe(self) -> str:
        speed = f"reference workload at {self.ratio:.2f}× its undisturbed time"
        if self.settled:
            return f"machine at its undisturbed speed after {self.waited_s:.0f} s: {speed}"
        return f"machine still slow after {self.waited_s:.0f} s: {speed}"


def settle_before_confirming(
    device: Device,
    reference: tuple[Path, Path],
    speed: MachineSpeed,
    recorded_reference_ms: float | None,
    workdir: Path,
    *,
    threads: int,
) -> str:
    """Before a time gate's failure is confirmed by a fresh measurement: wait, where the device's
    time means something and its undisturbed speed is known (this session's, or
    ``recorded_reference_ms``, the baseline's record for its class), until it runs at that speed
    again (:func:`settle`). Returns how the fresh measurement was taken, for the verdict."""
    info = device.info()
    expected = speed.undisturbed_ms(recorded_reference_ms)
    if expected is None or not info.time_meaningful:
        return "in a fresh measurement"
    settling = settle(device, reference, expected, workdir, threads=threads)
    return f"in a fresh measurement ({settling.describe()})"


def settle(
    device: Device,
    reference: tuple[Path, Path],
    undisturbed_ms: float,
    workdir: Path,
    *,
    threads: int,
    tolerance: float = SETTLE_TOLERANCE,
    timeout_s: float = SETTLE_TIMEOUT_S,
    pause_s: float = SETTLE_PAUSE_S,
) -> Settling:
    """Wait until ``device`` runs the reference workload within ``tolerance`` (a fraction) of
    ``undisturbed_ms`` (see :class:`MachineSpeed`); give up after ``timeout_s``.

    Before a failed time-based gate is re-measured: a shared machine can run slower for a minute
    or two, and not evenly (portable operators slowed 40 % while GEMMs slowed 5 %, moving vit_tiny
    int8's GEMM share by 7 points), so a re-measurement straight away repeats the disturbance
    instead of testing the model.
    """
    plan = RunPlan(runs=SETTLE_PROBE_RUNS, warmup=2, threads=threads, traced=False)
    variant = device.info().variants[-1]
    started = time.monotonic()
    probe = 0
    while True:
        result = device.run(*reference, variant, plan, workdir / f"settle-{probe}")
        ratio = min(result.latencies_ms) / undisturbed_ms
        waited = time.monotonic() - started
        if ratio <= 1 + tolerance or waited + pause_s > timeout_s:
            return Settling(ratio, waited, ratio <= 1 + tolerance)
        time.sleep(pause_s)
        probe += 1
