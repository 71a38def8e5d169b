"""The pieces every gate shares to say what it found: the case's name in a sentence, the advice to
record a better value, and the skip of a time-based gate where the device's time means nothing
(the verdict itself is a record: :mod:`pytest_sme2.records.verdict`)."""

from __future__ import annotations

from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict


def case_name(m: Measurement) -> str:
    threads = "" if m.threads == 1 else f", {m.threads} threads"
    return f"{m.model}[{m.dtype}] on {m.device.name}{threads}"


#: What a verdict says of a move in the good direction: news for the baseline, not a failure.
RECORD_IT = "record it with --sme2-update-baselines"


def time_meaningless(m: Measurement, gate: str) -> list[Verdict]:
    """The skip verdict for a time-based gate on a device whose time means nothing, else []."""
    if m.device.time_meaningful:
        return []
    reason = m.device.limits.get("latency", f"{m.device.name}'s time is not meaningful")
    if gate == "latency":
        return [Verdict(gate, Status.SKIP, reason)]
    return [Verdict(gate, Status.SKIP, f"category shares not judged: {reason}")]
