"""A/A calibration of the latency gate: how much its statistic moves on this machine when nothing
changed, and so how small a slowdown it can see.

``pytest --sme2-calibrate=N`` measures each case N times, unchanged, and stores in the case's time
record for this machine class (``TimeRecord.calibration``) the noise of the statistic the latency
gate judges (``LatencyBaseline.change_from``: the fastest run relative to the reference
workload's). From then on the case's latency tolerance is derived from it, never below the
session's ``--sme2-latency-tolerance``, and the reports state the gate's minimum detectable
effect (``Calibration.detectable_percent``).

It is a pytest flag rather than an ``sme2 calibrate`` command because a calibration must measure
exactly what the suite measures: the user's conftest registers the models, the marker and
``--sme2-*`` options choose cases and devices, xdist groups real devices — a separate command
would have to re-implement collection to get the same cases. Pure functions over measurements;
the plugin measures and writes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_sme2.errors import ConfigError
from pytest_sme2.judge.baseline import from_measurement
from pytest_sme2.judge.baseline_model import LATENCY_STATISTIC, Baseline, Calibration
from pytest_sme2.judge.latency import latency_baseline
from pytest_sme2.judge.moves import stable
from pytest_sme2.judge.policy import Policy
from pytest_sme2.records.device import DeviceInfo
from pytest_sme2.records.measurement import Measurement

#: The tolerance is this many standard deviations of the noise: a false alarm then needs a 3 σ
#: excursion in the first measurement and again in the confirming one
#: (``decision.judge_confirmed``).
NOISE_TO_TOLERANCE = 3.0


@dataclass(frozen=True)
class CalibrationResult:
    """What a calibration of one case decided: the baseline to write (its portable part and every
    time as stored, only this class's ``calibration`` set) and the line reports show."""

    baseline: Baseline
    calibration: Calibration
    summary: str


def not_calibrated_reason(device: DeviceInfo) -> str | None:
    """Why a case on ``device`` has no latency gate to calibrate, None when it has one."""
    if device.time_meaningful:
        return None
    return (
        f"{device.name}'s time is not meaningful: its latency is not gated, and the instruction "
        "gates it has instead are exact (nothing to calibrate)"
    )


def relative_fastest(m: Measurement) -> dict[str, float]:
    """Each variant's judged statistic in ``m``: its fastest run ÷ the reference's fastest run.

    Computed from the baseline form (``latency_baseline``: rounded as stored) so the noise is of
    exactly the number the gate compares."""
    if not m.reference_ms:
        raise ConfigError(
            f"{m.device.name} timed no reference workload beside {m.model}[{m.dtype}]: "
            "the latency gate's statistic cannot be calibrated there"
        )
    values = {}
    for variant, vm in m.variants.items():
        value = latency_baseline(vm.latencies_ms, m.reference_ms).relative_fastest
        assert value is not None  # the reference was timed
        values[str(variant)] = value
    return values


def noise_percent(measurements: Sequence[Measurement]) -> float:
    """The standard deviation, in percent, of the judged change between two unchanged
    measurements, the worse variant's: the sample standard deviation of the log statistic over
    the measurements, ×√2 because the gate compares two noisy measurements (now, and the
    baseline's)."""
    per_variant: dict[str, list[float]] = {}
    for m in measurements:
        for variant, value in relative_fastest(m).items():
            per_variant.setdefault(variant, []).append(math.log(value))
    return max(100 * math.sqrt(2) * statistics.stdev(logs) for logs in per_variant.values())


def calibrate(
    measurements: Sequence[Measurement],
    stored: Baseline | None,
    policy: Policy,
    *,
    path: Path,
    when: str,
) -> CalibrationResult:
    """The calibration of one case from ``measurements`` (N ≥ 2, unchanged, one machine class),
    set into the stored baseline at ``path``.

    Nothing but this class's ``calibration`` changes: the portable part and every time stay as
    stored, byte for byte; a class with no time record yet gets the first measurement's times.
    A case with no baseline at all is refused: what is calibrated is a gate against a baseline.
    Measurements whose runs lost the CPU to other work (:mod:`pytest_sme2.measure.cpu_load`) are
    left out, unless ``--sme2-judge-disturbed``: their noise is the neighbour's, and a tolerance
    made of it would let a regression through on every quiet day after.
    """
    if len(measurements) < 2:
        raise ConfigError("--sme2-calibrate needs at least 2 measurements of each case")
    first = measurements[0]
    case = f"{first.model}[{first.dtype}] on {first.device.name}"
    if stored is None:
        raise ConfigError(
            f"no baseline for {case} at {path}: record one first (run the suite once, or with "
            "--sme2-update-baselines), then calibrate"
        )
    disturbed = [m.disturbance.reason for m in measurements if m.disturbance is not None]
    tol = policy.tolerances
    if not policy.judge_disturbed:
        calm = [m for m in measurements if m.disturbance is None or m.disturbance.reason is None]
        if len(calm) < 2:
            reason = next(r for r in disturbed if r is not None)
            raise ConfigError(
                f"--sme2-calibrate: {case} ran undisturbed in {len(calm)} of {len(measurements)} "
                f"measurements, 2 are needed (one said: {reason}); calibrate on a quiet machine"
            )
        measurements, first = calm, calm[0]
    noise = stable(noise_percent(measurements))
    tolerance = stable(max(tol.latency_percent, NOISE_TO_TOLERANCE * noise))
    calibration = Calibration(
        runs=len(measurements),
        noise_percent=noise,
        tolerance_percent=tolerance,
        statistic=LATENCY_STATISTIC,
        when=when,
    )
    class_id = first.device.class_id
    record = stored.record_for(first.device)
    if record is None:
        record = from_measurement(first, tol, policy.quantities).machines[class_id]
    record = replace(record, calibration=calibration)
    baseline = replace(stored, machines={**stored.machines, class_id: record})
    sees = calibration.detectable_percent(record.latency_percent(tol))
    summary = (
        f"the latency gate sees a {sees:.1f}% slowdown of {case} on this machine class "
        f"({class_id}): noise {noise:g}% over {len(measurements)} unchanged measurements, "
        f"tolerance {record.latency_percent(tol):g}%"
    )
    return CalibrationResult(baseline, calibration, summary)
