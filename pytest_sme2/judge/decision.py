"""What the plugin does for one judged test: the verdicts (a time-only failure confirmed by a
fresh measurement, :func:`judge_confirmed`), the baseline to write and what changed, and the
failure text (:func:`decide`). The rules themselves are :mod:`pytest_sme2.judge.gates` and
:mod:`pytest_sme2.judge.time_gates`; this module only sequences them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_sme2.judge.baseline import Baseline, Tolerances, from_measurement
from pytest_sme2.judge.baseline_update import merge
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import judge
from pytest_sme2.judge.time_gates import TIME_GATES, disturbed_reason
from pytest_sme2.judge.wording import case_name
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


def only_time_gates_failed(verdicts: tuple[Verdict, ...]) -> bool:
    """Some gate failed, and every failed one is time-based (worth one fresh measurement)."""
    failed = [v.gate for v in verdicts if v.status is Status.FAIL]
    return bool(failed) and all(gate.startswith(TIME_GATES) for gate in failed)


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


def judge_confirmed(
    m: Measurement,
    baseline: Baseline | None,
    expectations: Expectations,
    tolerances: Tolerances,
    remeasure: Remeasure | None,
    *,
    judge_disturbed: bool = False,
) -> Judgement:
    """:func:`judge`, and where only time gates failed, fresh measurements spread in time decide.

    Wall-clock time is the one input a busy machine moves for a while; operator structure,
    kernels and parity are not re-measured away. Each fresh measurement is judged on its own
    (its method init the fastest of every measurement so far), up to :data:`CONFIRMATIONS` of
    them: the first that passes clears the failure (a regression fails every one), and a failure
    stands only when all failed — its verdicts then those of the measurement taken while the
    machine was fastest. A ``confirmed`` verdict says how it went and
    names the first failure.
    """
    verdicts = judge(m, baseline, expectations, tolerances, judge_disturbed=judge_disturbed)
    if remeasure is None or not only_time_gates_failed(verdicts):
        return Judgement(m, verdicts)
    first = failure_report(verdicts, strict=False) or ""
    taken, hows = [m], []
    for attempt in range(CONFIRMATIONS):
        fresh, how = remeasure()
        # init time is the fastest process of every measurement so far (``fastest_init``)
        fresh = fastest_init(fresh, *taken)
        taken.append(fresh)
        hows.append(how)
        judged = judge(fresh, baseline, expectations, tolerances, judge_disturbed=judge_disturbed)
        if not failure_report(judged, strict=False):
            which = f"fresh measurement {attempt + 1} of up to {CONFIRMATIONS}"
            message = f"passed in {which} ({how}); the first had failed: {first.splitlines()[0]}"
            return Judgement(fresh, (*judged, Verdict("confirmed", Status.PASS, message)), first)
    # Judged as the record was taken: on the measurement taken while the machine was fastest.
    judged_on = fastest(*taken)
    verdicts = judge(judged_on, baseline, expectations, tolerances, judge_disturbed=judge_disturbed)
    persisted = f"in {CONFIRMATIONS} fresh measurements spread in time ({'; '.join(hows)})"
    confirmed = Verdict("confirmed", Status.FAIL, f"the failure persisted {persisted}")
    return Judgement(judged_on, (*verdicts, confirmed), first)


@dataclass(frozen=True)
class Decision:
    """Everything the plugin acts on for one test: what to store, what to report, whether to
    fail. Decided here so the plugin only carries it out."""

    #: the measurement the verdicts judge (the confirming one, when one was taken)
    measurement: Measurement
    verdicts: tuple[Verdict, ...]
    #: the baseline to write, None when there is nothing to write
    baseline: Baseline | None
    #: one line per change the write makes (``baseline_update.merge``)
    changes: tuple[str, ...]
    #: the text the test fails with, None when it passes
    failure: str | None
    #: the first measurement's failure report, when a fresh measurement was taken to confirm it
    remeasured_after: str | None = None


def decide(
    m: Measurement,
    stored: Baseline | None,
    expectations: Expectations,
    tolerances: Tolerances,
    *,
    path: Path,
    update: bool,
    strict: bool,
    remeasure: Remeasure | None,
    set_aside: str | None = None,
    judge_disturbed: bool = False,
) -> Decision:
    """Judge ``m`` against the baseline stored at ``path`` (``stored``; None when there is none).

    With no baseline, or with ``update`` (``--sme2-update-baselines``), the measurement is merged
    into the stored one (``baseline_update.merge``: only what moved beyond tolerance changes) and
    judged against the result; a missing baseline fails the test once, so that a reviewer
    commits it. A baseline just written has nothing to confirm, so only otherwise is a failure of
    time gates re-measured (:func:`judge_confirmed`). ``strict`` fails skipped gates too.
    ``set_aside`` is the line saying where an invalid stored file went (``baseline_file.read``):
    the first change.
    """
    baseline, changes = stored, ()
    if stored is None or update:
        new = from_measurement(m, tolerances)
        # a busy session never becomes the yardstick of quiet ones: the class's record stays
        if disturbed := disturbed_reason(m, judge_disturbed):
            new = replace(new, machines={})
        baseline, changes = merge(stored, new, tolerances)
        changes = (set_aside, *changes) if set_aside else changes
        if disturbed:
            changes = (*changes, f"[{m.device.class_id}] time record not written: {disturbed}")
    judgement = judge_confirmed(
        m,
        baseline,
        expectations,
        tolerances,
        None if changes else remeasure,
        judge_disturbed=judge_disturbed,
    )
    failure = failure_report(judgement.verdicts, strict=strict)
    if stored is None and not update:
        failure = (
            f"no baseline for {case_name(m)}: wrote {path}; review and commit it, then re-run "
            "(or pass --sme2-update-baselines)" + (f"\n{failure}" if failure else "")
        )
    return Decision(
        measurement=judgement.measurement,
        verdicts=judgement.verdicts,
        baseline=baseline if changes else None,
        changes=changes,
        failure=failure,
        remeasured_after=judgement.remeasured_after,
    )
