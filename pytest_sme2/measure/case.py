"""Run one exported model on a device, every variant it supports → a Measurement (the case
record, :mod:`pytest_sme2.records.measurement`).

One function per kind of run over shared pieces: where the device's time is judged, interleaved
timing rounds (:mod:`pytest_sme2.measure.timing`) and then one traced run per variant, its profile
and the device's evidence; where time means nothing, the device's counted run
(:meth:`~pytest_sme2.devices.base.Device.counted_run`), whose instructions are the profile,
else one traced inference and the evidence run. Every run's outputs are checked and SME2-on's
judged against SME2-off's (:mod:`pytest_sme2.measure.output_checks`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_sme2 import progress
from pytest_sme2.analysis.categories import Classifier
from pytest_sme2.analysis.efficiency import Peak, chip_peak
from pytest_sme2.analysis.profile import Profile
from pytest_sme2.analysis.trace import Trace
from pytest_sme2.devices.base import Device
from pytest_sme2.measure.case_runs import CaseRuns
from pytest_sme2.measure.deadline import Deadline
from pytest_sme2.measure.modelled_etdump import write_modelled_etdump
from pytest_sme2.measure.output_checks import parity
from pytest_sme2.measure.plan import CaseProgram, MeasurePlan
from pytest_sme2.measure.side_by_side import side_by_side
from pytest_sme2.measure.timing import Timing, disturbance, machine_load, timing_rounds
from pytest_sme2.records.device import Variant
from pytest_sme2.records.disturbance import MachineLoad
from pytest_sme2.records.evidence import Sme2Evidence
from pytest_sme2.records.measurement import LoadMeasurement, Measurement, VariantMeasurement
from pytest_sme2.runner.invoke import RunResult

#: Seconds a measurement runs before it says which variant and step it is at: host cases take a
#: few seconds and stay silent; one emulated real architecture (EfficientNet-B0, 64 px) runs
#: over 10 minutes on qemu-sme2, which would otherwise pass without a word.
QUIET_S = 10.0


def measure(
    device: Device,
    program: CaseProgram,
    plan: MeasurePlan,
    workdir: Path,
    *,
    classifier: Classifier | None = None,
    reference: tuple[Path, Path] | None = None,
    deadline: Deadline | None = None,
) -> Measurement:
    """Run every variant ``device`` supports of ``program``, its runs' files under ``workdir``:
    the runs of each variant, by the kind of device, then the record (made once the machine's
    load over the runs is known).

    ``reference`` (a .pte and its inputs) is timed in every round too, where the device's time
    is meaningful, so latency can be judged against the machine's speed of the moment.
    ``deadline`` sets each runner call's deadline (default: ``plan.timeout_s``, else the
    device's own). A measurement that takes over :data:`QUIET_S` says which variant and step it
    is at (:mod:`pytest_sme2.progress`): one real architecture emulates for many minutes."""
    info = device.info()
    title = f"measure {program.model}[{program.dtype}] on {info.name}"
    with (
        progress.task(title, remember=False, quiet_s=QUIET_S) as running,
        machine_load(device, info) as cpu_load,
    ):
        runs = CaseRuns.start(
            device,
            info,
            program,
            plan,
            workdir,
            classifier=classifier,
            deadline=deadline or Deadline(plan.timeout_s),
            running=running,
        )
        if info.time_meaningful:
            timing = timing_rounds(runs, reference)
            done = {v: _timed_variant(runs, v, timing.runs[v]) for v in info.variants}
        else:
            timing = None
            done = _emulated_variants(runs, info.variants)
    return _record(runs, done, timing, cpu_load)


@dataclass(frozen=True)
class _Measured:
    """One variant's record, and the run it was traced in (whose CPU time tells of disturbance)."""

    record: VariantMeasurement
    traced: RunResult


def _timed_variant(runs: CaseRuns, variant: Variant, timed: Sequence[RunResult]) -> _Measured:
    """Where time is judged: the variant's traced run gives its profile, the evidence run the
    kernels that ran; latency is its timing-only runs'."""
    traced, trace = runs.traced(variant)
    variant_profile = runs.traced_profile(traced, trace)
    evidence = runs.evidence(variant)
    record = _variant_record(variant, traced, variant_profile, evidence, timed, trace=trace)
    return _Measured(
        replace(record, work=runs.work(trace.runs[-1] if trace.runs else None)), traced
    )


def _emulated_variants(runs: CaseRuns, variants: Sequence[Variant]) -> dict[Variant, _Measured]:
    """Each variant's record where time means nothing, two variants side by side
    (:mod:`pytest_sme2.measure.side_by_side`): each is a runner process of its own whose
    instructions no neighbour changes, so where a core is free the case takes as long as its slower
    variant (the first count of a qemu-sme2 case is tens of seconds of qemu per variant; a decode
    step with ExecuTorch's LLM kernels, a minute). Each variant keeps its steps off the
    measurement's progress line, which two threads would take turns to overwrite; an error is
    sme2-on's first.
    """
    if len(variants) != 2:
        return {variant: _emulated_variant(runs, variant) for variant in variants}
    first, second = variants
    runs.running.stage(f"{first} and {second} side by side")
    one, other = side_by_side(
        lambda: _emulated_variant(runs.apart(), first),
        lambda: _emulated_variant(runs.apart(), second),
    )
    return {first: one, second: other}


def _emulated_variant(runs: CaseRuns, variant: Variant) -> _Measured:
    """Where time means nothing and each inference costs seconds: the device's counted run,
    whose instructions are the profile; where it counts none, one traced inference gives the
    operator names, structure and outputs, and the evidence run the instruction counts."""
    counted = runs.counted(variant)
    trace = None
    if counted is not None:
        traced, evidence = counted
        variant_profile = runs.counted_profile(evidence)
    else:
        traced, trace = runs.traced(variant)
        variant_profile = runs.traced_profile(traced, trace)
        evidence = runs.evidence(variant)
    instructions = evidence.instruction_trace if evidence else None
    # the kit re-reads an ETDump's times: give it the counted inference's, in instructions
    modelled = write_modelled_etdump(instructions) if instructions is not None else None
    record = _variant_record(
        variant, traced, variant_profile, evidence, (), trace=trace, modelled_etdump=modelled
    )
    inference = instructions or trace
    work = runs.work(inference.runs[-1] if inference is not None and inference.runs else None)
    return _Measured(replace(record, work=work), traced)


def _variant_record(
    variant: Variant,
    traced: RunResult,
    variant_profile: Profile,
    evidence: Sme2Evidence | None,
    timed: Sequence[RunResult],
    *,
    trace: Trace | None,
    modelled_etdump: Path | None = None,
) -> VariantMeasurement:
    """The variant's record: latency from its timing-only runs (``timed``), else its traced
    run's (recorded, never judged); the evidence without its instruction trace (the profile
    summarises it); the program's load cost from the timing-only runs, else the traced one."""
    return VariantMeasurement(
        variant=variant,
        latencies_ms=tuple(ms for r in timed for ms in r.latencies_ms) or traced.latencies_ms,
        timing_warmup=timed[0].warmup if timed else None,
        profile=variant_profile,
        etdump=traced.etdump,
        outputs=traced.outputs,
        evidence=replace(evidence, instruction_trace=None) if evidence else None,
        load=program_load(timed or [traced], evidence, timed=bool(timed)),
        modelled_etdump=modelled_etdump,
        seen=traced.seen,
        trace=trace,
    )


def _record(
    runs: CaseRuns,
    done: dict[Variant, _Measured],
    timing: Timing | None,
    cpu_load: Sequence[MachineLoad],
) -> Measurement:
    """The case record: the variants' records, SME2-on's outputs judged against SME2-off's, and
    where time is judged (``timing``), the reference workload's latencies and the disturbance."""
    program, classifier = runs.program, runs.classifier
    measured = {variant: m.record for variant, m in done.items()}
    traced = {variant: m.traced for variant, m in done.items()}
    return Measurement(
        parity=parity(measured, program.model, program.dtype, program.parity_tolerance),
        numerics=program.numerics,
        reference_ms=timing.reference_ms if timing is not None else (),
        one_thread_ms=timing.one_thread_ms if timing is not None else {},
        model=program.model,
        dtype=program.dtype,
        threads=runs.plan.threads,
        device=runs.info,
        variants=measured,
        interleaved=len(runs.info.variants) > 1,
        overrides=dict(classifier.overrides) if classifier is not None else {},
        tokens=program.tokens,
        disturbance=disturbance(timing, traced, cpu_load) if timing is not None else None,
        peak=_peak(runs) if runs.info.time_meaningful else None,
    )


def _peak(runs: CaseRuns) -> Peak:
    """The peak the case's operators are shown against: ``--sme2-peak``, else the device's
    chip's published figure (a Mac's ``chip``, a phone's ``soc``)."""
    fingerprint = runs.info.fingerprint
    chip = str(fingerprint.get("chip") or fingerprint.get("soc") or "")
    return chip_peak(chip, runs.program.dtype, runs.plan.peak_gflops)


def program_load(
    runs: Sequence[RunResult], evidence: Sme2Evidence | None, *, timed: bool
) -> LoadMeasurement | None:
    """One variant's program load cost and memory from its runner processes: the fastest
    program load and method init (a busy neighbour only slows them), the largest peak resident
    memory; where the runs are not timed (time means nothing), neither (qemu's resident memory
    is its own), and init in instructions from the evidence (the counted run's, under
    emulation). Not the machine's CPU load (:func:`pytest_sme2.measure.timing.machine_load`)."""
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


def fastest(*measurements: Measurement) -> Measurement:
    """The measurement taken while the machine was fastest: a time gate's failure is confirmed
    on it, so a slow spell of one measurement does not fail a test while a regression, present
    in both, still does.

    Only undisturbed measurements compete where there are any (:mod:`pytest_sme2.measure.cpu_load`):
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


def fastest_init(m: Measurement, *others: Measurement) -> Measurement:
    """``m`` with each variant's program load and method init the fastest of all ``(m,
    *others)``'s runner processes: a one-time phase of ~0.4 ms, memory-bound (packing weights,
    faulting pages in), that a neighbour's memory traffic slows for as long as it lasts — seen,
    +19 % and +27 % in 2 of 20 unchanged sessions beside bursts of 64 MB copies, in every one of
    three fresh measurements. Over measurements spread in time it is the fastest process that
    saw a quiet machine; a regression (weights that pack slower) slows every process."""
    variants = {}
    for variant, vm in m.variants.items():
        loads = [o.variants[variant].load for o in (m, *others) if variant in o.variants]
        times = [load for load in loads if load is not None and load.method_init_ms is not None]
        if vm.load is None or not times:
            variants[variant] = vm
            continue
        best = replace(
            vm.load,
            method_init_ms=min(load.method_init_ms or 0.0 for load in times),
            program_load_ms=min(
                (load.program_load_ms for load in times if load.program_load_ms is not None),
                default=vm.load.program_load_ms,
            ),
        )
        variants[variant] = replace(vm, load=best)
    return replace(m, variants=variants)
