"""The ``sme2-losses`` gate: no operator may cost more with SME2 on than off beyond its tolerance,
judged from the measurement itself (SME2-on against SME2-off of the same case), so it needs no
baseline and stores nothing.

Why a gate of its own: the speedup floor judges the whole inference, and an operator SME2 slows
down passes whenever the others gain (:mod:`pytest_sme2.analysis.losses`). Its verdict names the
operator, the kernels on each side where the device shows them, and both costs.

Two verdict names, as the device's numbers are: ``sme2-losses`` on an instruction-counting
(emulated) device — exact counts, judged at once (``counted``: not judged for a multi-threaded
emulated case, whose spin-waits vary them) — and ``sme2-time-losses`` on a device whose time
means something — wall-clock time, so not judged on a busy machine and a failure is confirmed by
fresh measurements, like every time gate.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_sme2.analysis.kernels import kernels_by_kind
from pytest_sme2.analysis.losses import (
    MIN_INSTRUCTIONS,
    MIN_MS,
    MIN_TIMED_RUNS,
    OperatorLoss,
    instruction_losses,
    instructions_per_run,
    kernels_of_kinds,
    names_by_kind,
    run_times_by_kind,
    time_losses,
)
from pytest_sme2.errors import TraceError
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement, VariantMeasurement
from pytest_sme2.records.verdict import Status, Verdict


@dataclass(frozen=True)
class _Part:
    """A verdict name of the gate and what kind of numbers it judges (``gate_names`` reads the
    flags: ``counted`` and ``wall_clock`` decide where a verdict is dropped or confirmed)."""

    name: str
    counted: bool = False
    wall_clock: bool = False


COUNTED_LOSSES = _Part("sme2-losses", counted=True)
TIMED_LOSSES = _Part("sme2-time-losses", wall_clock=True)
#: The gate names a loss fails under.
LOSS_GATES = (COUNTED_LOSSES.name, TIMED_LOSSES.name)


def kernels_per_kind(vm: VariantMeasurement) -> dict[str, tuple[str, ...]]:
    """Unpacked operator kind → the kernels that ran in it, where the device shows kernels per
    operator (qemu-sme2); {} elsewhere."""
    if vm.evidence is None or not vm.evidence.operator_kernels:
        return {}
    return kernels_of_kinds(kernels_by_kind(vm.evidence.operator_kernels))


def measured_losses(m: Measurement, tolerance_percent: float) -> tuple[OperatorLoss, ...] | str:
    """The SME2 losses of ``m`` beyond ``tolerance_percent``, or why they cannot be judged (a
    sentence ending "not judged: …"). Instructions where the profiles count them; else each
    traced run's time, where the device's time means something."""
    on, off = m.variants[Variant.ON], m.variants[Variant.OFF]
    if on.profile.counts_instructions and off.profile.counts_instructions:
        return instruction_losses(
            instructions_per_run(on.profile),
            instructions_per_run(off.profile),
            tolerance_percent,
            kernels_per_kind(on),
            kernels_per_kind(off),
        )
    if not m.device.time_meaningful:
        reason = m.device.limits.get("latency", f"{m.device.name}'s time is not meaningful")
        return f"not judged: {reason}, and it counts no instructions"
    try:
        on_runs, off_runs = (vm.parsed_trace().runs[vm.profile.warmup :] for vm in (on, off))
    except (TraceError, OSError) as error:
        return f"not judged: the traced runs cannot be read ({error})"
    kept = min(len(on_runs), len(off_runs))
    if kept < MIN_TIMED_RUNS:
        return (
            f"not judged: {kept} traced run(s) kept; comparing time per operator needs "
            f"{MIN_TIMED_RUNS} per variant (--sme2-traced-runs)"
        )
    return time_losses(
        run_times_by_kind(on_runs),
        run_times_by_kind(off_runs),
        tolerance_percent,
        names_by_kind(op.name for op in on.profile.operators),
    )


def judged_floor(m: Measurement) -> str:
    """The size per run under which an operator of ``m`` is not judged, with its unit."""
    if m.variants[Variant.ON].profile.counts_instructions:
        return f"{MIN_INSTRUCTIONS:,} instructions"
    return f"{MIN_MS:g} ms"


class Sme2Losses:
    """``sme2_loss_tolerance``: every operator kind present in both variants costs at most the
    tolerance more with SME2 on than off (see the module's docstring); on wherever both variants
    ran on a device with SME2, off with ``sme2_loss_tolerance=None`` or
    ``--sme2-loss-tolerance=off``."""

    name = "sme2-losses"
    parts = (COUNTED_LOSSES, TIMED_LOSSES)

    def check(self, judging: Judging) -> list[Verdict]:
        m = judging.measurement
        tolerance = judging.expectations.loss_tolerance(judging.loss_tolerance)
        if tolerance is None or m.comparison is None or not m.device.has_sme2:
            return []
        timed = not m.variants[Variant.ON].profile.counts_instructions
        part = TIMED_LOSSES if timed else COUNTED_LOSSES
        found = measured_losses(m, tolerance)
        if isinstance(found, str):
            return [Verdict(part.name, Status.SKIP, f"SME2 losses {found}")]
        rule = (
            f"tolerance {tolerance:g} %, operators under {judged_floor(m)} per run not judged"
            + ("; every traced run compared" if timed else "")
        )
        if not found:
            message = f"no operator costs more with SME2 on than off beyond the tolerance ({rule})"
            return [Verdict(part.name, Status.PASS, message)]
        worst = found[0]
        message = (
            f"{len(found)} operator(s) of {case_name(m)} cost more with SME2 on than off: "
            f"{worst.sentence()} ({rule})"
        )
        return [Verdict(part.name, Status.FAIL, message, tuple(loss.sentence() for loss in found))]


def losses_for_report(m: Measurement) -> tuple[OperatorLoss, ...] | str | None:
    """Every operator kind that cost more with SME2 on than off, at no tolerance (the report lists
    the near misses the gate lets pass too), or why it cannot tell; None where the measurement
    has not both variants on a device with SME2."""
    if m.comparison is None or not m.device.has_sme2:
        return None
    return measured_losses(m, 0.0)


SME2_LOSSES = Sme2Losses()
