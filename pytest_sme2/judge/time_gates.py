"""Time against the time record of the measuring machine's class — category shares, latency, and how
small a slowdown the latency gate sees there — and not judged, saying why, where that class has no
record, the device's time means nothing (its counted instruction shares stand in), or other work
took the CPU from the runs (:mod:`pytest_sme2.measure.cpu_load`).

Time belongs to a machine class and to an undisturbed machine; everything portable (structure,
kernels, parity, instructions) is judged on every machine of the device kind.
"""

from __future__ import annotations

from pytest_sme2.judge.baseline_model import LATENCY_STATISTIC, TimeRecord
from pytest_sme2.judge.counted import INSTRUCTION_SHARES
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.latency import LATENCY
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.shares import SHARES
from pytest_sme2.judge.wording import case_name, time_meaningless
from pytest_sme2.records.device import describe_class
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict

#: The gate that says a case's time gates were not judged: other work took the CPU from its runs.
DISTURBED = "time-disturbed"


def without_disturbed_time(
    m: Measurement, verdicts: list[Verdict], time_gates: tuple[str, ...]
) -> list[Verdict]:
    """``verdicts`` without the time gates' (those ``time_gates`` begin) where the measurement
    was disturbed (:mod:`pytest_sme2.measure.cpu_load`), and one skip saying why in their place.

    Every time gate alike, failed or passed: a run that lost the CPU can neither show a
    regression nor clear one, and a false red teaches users to ignore CI. The portable gates
    (structure, kernels, parity, numerics, instructions) stand. ``--sme2-strict`` fails the skip.
    """
    reason = disturbed_reason(m, judge_disturbed=False)
    timed = [v for v in verdicts if v.gate.startswith(time_gates)]
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


def disturbed_reason(m: Measurement, judge_disturbed: bool) -> str | None:
    """Why ``m``'s time is neither judged nor recorded (:mod:`pytest_sme2.measure.cpu_load`), None
    where it is."""
    if judge_disturbed or m.disturbance is None:
        return None
    return m.disturbance.reason


#: The gate that says a case's time gates were not judged: this machine class has no record.
NO_TIME_RECORD = "time-record"

#: The informational verdict saying how small a slowdown the latency gate sees on this machine.
LATENCY_SENSITIVITY = "latency-sensitivity"


class AgainstTimeRecord:
    """The gates against the machine class's time record (shares, then latency and its
    sensitivity); where time means nothing, the counted instruction shares in their place."""

    name = NO_TIME_RECORD
    #: the gates it judges with, in order
    parts = (INSTRUCTION_SHARES, SHARES, LATENCY)

    def check(self, judging: Judging) -> list[Verdict]:
        m = judging.measurement
        if judging.stored is None:
            return []
        if not m.device.time_meaningful:
            shares = INSTRUCTION_SHARES.check(judging) or time_meaningless(m, "shares")
            return [*shares, *time_meaningless(m, "latency")]
        record = judging.record
        if record is None:
            return [no_time_record(m)]
        latency = LATENCY.check(judging)
        sensitivity = [latency_sensitivity(m, record, judging.tolerances)] if latency else []
        return [*SHARES.check(judging), *latency, *sensitivity]


def no_time_record(m: Measurement) -> Verdict:
    """Time belongs to a machine class: with no record for this one, latency, shares and speedup
    against the baseline are not judged (the portable gates still are)."""
    return Verdict(
        NO_TIME_RECORD,
        Status.SKIP,
        f"time gates not judged for {case_name(m)}: the baseline has no time record for this "
        f"machine class ({m.device.class_id}: {describe_class(m.device.machine_class)}); "
        "record it with --sme2-update-baselines",
    )


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


AGAINST_TIME_RECORD = AgainstTimeRecord()
