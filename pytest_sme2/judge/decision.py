"""A case's verdicts as they stand: a failure of only wall-clock gates confirmed by fresh
measurements spread in time (:func:`judge_confirmed`), and the text a failing test shows
(:func:`failure_report`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_sme2.judge.gates import Judge
from pytest_sme2.measure.case import fastest, fastest_init
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict


def failure_report(verdicts: tuple[Verdict, ...], *, strict: bool) -> str | None:
    """The failure text for a test: failed gates (and skipped ones under ``--sme2-strict``), each
    as its sentence followed by its indented details; None when the test passes."""
    bad = [v for v in verdicts if v.status is Status.FAIL or (strict and v.status is Status.SKIP)]
    if not bad:
        return None
    lines = []
    for v in bad:
        prefix = "gate skipped under --sme2-strict: " if v.status is Status.SKIP else ""
        lines.append(prefix + v.message)
        lines += [f"    {d}" for d in v.details]
    return "\n".join(lines)


@dataclass(frozen=True)
class Judgement:
    """The verdicts of a case, and the measurement they judge (the confirming one, if taken)."""

    measurement: Measurement
    verdicts: tuple[Verdict, ...]
    #: the first measurement's failure report, when a fresh measurement was taken to confirm it
    remeasured_after: str | None = None


#: ``remeasure()`` → a fresh measurement, taken after a pause once the machine settled, and how
#: (``measure.settle.settle_before_confirming``: "after a 3.2 s pause, machine at …").
Remeasure = Callable[[], tuple[Measurement, str]]

#: Fresh measurements that may clear a failure of time gates. A neighbour that comes and goes in
#: bursts (1–4 s of load, 1–3 s of rest) covers a millisecond model's whole measurement, and its
#: re-measurement too when that follows at once (issue 36: 4 of 12 unchanged sessions failed,
#: confirmed "after 0 s"); measurements spread over several seconds cannot all land in bursts.
CONFIRMATIONS = 3


def judge_confirmed(m: Measurement, judge: Judge, remeasure: Remeasure | None) -> Judgement:
    """``judge(m)``, and where only time gates failed, fresh measurements spread in time decide.

    Wall-clock time is the one input a busy machine moves for a while; operator structure,
    kernels and parity are not re-measured away. Each fresh measurement is judged on its own
    (its method init the fastest of every measurement so far), up to :data:`CONFIRMATIONS` of
    them: the first that passes clears the failure (a regression fails every one), and a failure
    stands only when all failed — its verdicts then those of the measurement taken while the
    machine was fastest. A ``confirmed`` verdict says how it went and names the first failure.
    """
    verdicts = judge(m)
    if remeasure is None or not judge.only_time_failed(verdicts):
        return Judgement(m, verdicts)
    first = failure_report(verdicts, strict=False) or ""
    taken, hows = [m], []
    for attempt in range(CONFIRMATIONS):
        fresh, how = remeasure()
        # init time is the fastest process of every measurement so far (``fastest_init``)
        fresh = fastest_init(fresh, *taken)
        taken.append(fresh)
        hows.append(how)
        judged = judge(fresh)
        if not failure_report(judged, strict=False):
            which = f"fresh measurement {attempt + 1} of up to {CONFIRMATIONS}"
            message = f"passed in {which} ({how}); the first had failed: {first.splitlines()[0]}"
            return Judgement(fresh, (*judged, Verdict("confirmed", Status.PASS, message)), first)
    # Judged as the record was taken: on the measurement taken while the machine was fastest.
    judged_on = fastest(*taken)
    persisted = f"in {CONFIRMATIONS} fresh measurements spread in time ({'; '.join(hows)})"
    confirmed = Verdict("confirmed", Status.FAIL, f"the failure persisted {persisted}")
    return Judgement(judged_on, (*judge(judged_on), confirmed), first)
