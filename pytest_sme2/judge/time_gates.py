"""The time gates: latency, category shares and SME2 speedup, judged against the time record of the
measuring machine's class — and not judged, saying why, where that class has no record or other
work took the CPU from the runs (:mod:`pytest_sme2.measure.cpu_load`).

Time belongs to a machine class and to an undisturbed machine; everything portable (structure,
kernels, parity, instructions) is judged in :mod:`pytest_sme2.judge.gates`, which calls these.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_sme2.judge.baseline import (
    LATENCY_STATISTIC,
    Move,
    TimeRecord,
    Tolerances,
    latency_move,
    notes_diff,
    speedup_baseline,
    speedup_move,
)
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.wording import RECORD_IT, case_name, shares_verdict
from pytest_sme2.records.device import describe_class
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict

#: Gates whose numbers come from wall-clock time, which a busy machine moves for a moment (the
#: method init ones: ``load_gates``).
TIME_GATES = (
    "latency",
    "shares",
    "share-limits",
    "speedup",
    "init-time",
    "max-init",
    "thread-gain",
)


#: The gate that says a case's time gates were not judged: other work took the CPU from its runs.
DISTURBED = "time-disturbed"


def without_disturbed_time(m: Measurement, verdicts: list[Verdict]) -> list[Verdict]:
    """``verdicts`` without the time gates' where the measurement was disturbed
    (:mod:`pytest_sme2.measure.cpu_load`), and one skip saying why in their place.

    Every time gate alike, failed or passed: a run that lost the CPU can neither show a
    regression nor clear one, and a false red teaches users to ignore CI. The portable gates
    (structure, kernels, parity, numerics, instructions) stand. ``--sme2-strict`` fails the skip.
    """
    reason = disturbed_reason(m, judge_disturbed=False)
    timed = [v for v in verdicts if v.gate.startswith(TIME_GATES)]
    if reason is None or not timed:
        return verdicts
    gates = ", ".join(dict.fromkeys(v.gate.split("[")[0] for v in timed))
    skip = Verdict(
        DISTURBED,
        Status.SKIP,
        f"time gates not judged for {case_name(m)}: {reason}; a busy machine moves time, not "
        "the model (measure on a quiet machine, or --sme2-strict to fail)",
        (f"not judged: {gates}",),
    )
    return [v for v in verdicts if v not in timed] + [skip]


#: The gate that says a case's time gates were not judged: this machine class has no record.
NO_TIME_RECORD = "time-record"


def no_time_record(m: Measurement) -> list[Verdict]:
    """Time belongs to a machine class: with no record for this one, latency, shares and speedup
    against the baseline are not judged (the portable gates still are)."""
    return [
        Verdict(
            NO_TIME_RECORD,
            Status.SKIP,
            f"time gates not judged for {case_name(m)}: the baseline has no time record for this "
            f"machine class ({m.device.class_id}: {describe_class(m.device.machine_class)}); "
            "record it with --sme2-update-baselines",
        )
    ]


def speedup_gates(
    m: Measurement, record: TimeRecord | None, exp: Expectations, tol: Tolerances
) -> list[Verdict]:
    comparison = m.comparison
    floor = exp.speedup_floor_at(m.threads)
    if comparison is None or not m.device.time_meaningful:
        if floor is None and (record is None or record.speedup is None):
            return []
        reason = m.device.limits.get("speedup", f"{m.device.name} cannot measure an SME2 speedup")
        return [Verdict("speedup", Status.SKIP, reason)]
    s = comparison.speedup
    verdicts = []
    if floor is not None:
        at = f" at {m.threads} threads" if isinstance(exp.speedup_floor, Mapping) else ""
        if s.high < floor:
            message = f"SME2 speedup {s.describe()} is below the floor {floor:g}×{at} for "
            verdicts.append(Verdict("speedup-floor", Status.FAIL, message + case_name(m)))
        else:
            message = f"SME2 speedup {s.describe()} ≥ floor {floor:g}×{at}"
            verdicts.append(Verdict("speedup-floor", Status.PASS, message))
    if record is not None and record.speedup is not None:
        stored = record.speedup.value
        move = speedup_move(speedup_baseline(s), record.speedup, tol)
        beyond = f" beyond the {tol.speedup_percent:g}% tolerance"
        verdicts.append(
            Verdict(
                "speedup-baseline",
                Status.FAIL if move is Move.FELL else Status.PASS,
                {
                    Move.FELL: f"SME2 speedup {s.describe()} fell below the baseline {stored:g}×"
                    f"{beyond} for {case_name(m)}",
                    Move.WITHIN: f"SME2 speedup {s.value:.2f}× vs baseline {stored:g}×",
                    Move.ROSE: f"SME2 speedup {s.describe()} rose above the baseline {stored:g}×"
                    f"{beyond}: {RECORD_IT}",
                }[move],
            )
        )
    return verdicts


def share_gates(
    m: Measurement, now: TimeRecord, record: TimeRecord, tol: Tolerances
) -> list[Verdict]:
    return [
        shares_verdict(
            m, variant, now.variants[str(variant)].shares, stored.shares, tol, "share", "shares"
        )
        for variant in m.variants
        if (stored := record.variants.get(str(variant))) is not None
    ]


def latency_gates(
    m: Measurement, now: TimeRecord, record: TimeRecord, tol: Tolerances
) -> list[Verdict]:
    # Same machine class, so judged; what else changed since the record is said alongside.
    noted = tuple(f"since recorded: {line}" for line in notes_diff(record.notes, m.device.notes))
    percent = record.latency_percent(tol)
    verdicts = []
    for variant, vm in m.variants.items():
        stored = record.variants.get(str(variant))
        if stored is None:
            continue
        measured = now.variants[str(variant)].latency
        change = measured.change_from(stored.latency)
        gate = f"latency[{variant}]"
        numbers = (
            f"fastest of {len(vm.latencies_ms)} runs {measured.min_ms:g} ms vs baseline "
            f"{stored.latency.min_ms:g} ms; median {measured.median_ms:g} ms vs "
            f"{stored.latency.median_ms:g} ms"
        )
        relative = None not in (measured.relative_fastest, stored.latency.relative_fastest)
        if relative:
            numbers += (
                f"; reference workload's fastest {min(measured.reference_samples_ms):g} ms vs "
                f"{min(stored.latency.reference_samples_ms):g} ms"
            )
        what = "relative to the machine's speed" if relative else "in raw time (no reference timed)"
        move = latency_move(measured, stored.latency, percent)
        beyond = f"beyond the {percent:g}% tolerance"
        if move is Move.ROSE:
            message = (
                f"E2E latency of {case_name(m)} ({variant}) rose {100 * (change - 1):.1f}% {what} "
                f"({numbers}), {beyond}"
            )
            verdicts.append(Verdict(gate, Status.FAIL, message, noted))
        else:
            faster = f", faster {beyond}: {RECORD_IT}" if move is Move.FELL else ""
            message = f"E2E latency {change:.3f}× the baseline {what} ({numbers}){faster}"
            verdicts.append(Verdict(gate, Status.PASS, message, noted))
    if verdicts:
        verdicts.append(latency_sensitivity(m, record, tol))
    return verdicts


#: The informational verdict saying how small a slowdown the latency gate sees on this machine.
LATENCY_SENSITIVITY = "latency-sensitivity"


def latency_sensitivity(m: Measurement, record: TimeRecord, tol: Tolerances) -> Verdict:
    """How small a slowdown the latency gate sees on this machine class: the minimum detectable
    effect where the record is calibrated (``--sme2-calibrate``), else the default tolerance and
    how to learn more. Its one detail is the short form the session table shows."""
    percent = record.latency_percent(tol)
    cal = record.calibration
    if cal is None or cal.statistic != LATENCY_STATISTIC:
        return Verdict(
            LATENCY_SENSITIVITY,
            Status.PASS,
            f"the latency gate of {case_name(m)} fails a rise beyond {percent:g}%, the default "
            "tolerance: not calibrated on this machine class (--sme2-calibrate=5 measures how "
            "small a slowdown it sees)",
            (f">{percent:g}% (not calibrated)",),
        )
    sees = cal.detectable_percent(percent)
    return Verdict(
        LATENCY_SENSITIVITY,
        Status.PASS,
        f"the latency gate sees a {sees:.1f}% slowdown of {case_name(m)} on this machine class in "
        f"≥ 95% of sessions (tolerance {percent:g}%; calibrated {cal.when[:10]}: noise "
        f"{cal.noise_percent:g}% over {cal.runs} unchanged measurements)",
        (f"{sees:.1f}%",),
    )


def disturbed_reason(m: Measurement, judge_disturbed: bool) -> str | None:
    """Why ``m``'s time is neither judged nor recorded (:mod:`pytest_sme2.measure.cpu_load`), None
    where it is."""
    if judge_disturbed or m.disturbance is None:
        return None
    return m.disturbance.reason
