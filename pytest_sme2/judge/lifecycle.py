"""A case's baseline, from file to verdicts, in one function (as pytest-regressions'
``perform_regression_check``): :func:`decide`.

* invalid (unreadable, not JSON, outside the schema): one line naming the file fails the test —
  or, under ``--sme2-update-baselines``, the file is set aside when read, before the case is
  measured (``baseline_file.read``), and the fresh one is written as if none existed, the first
  change saying where the old one went; a file of a newer schema is never touched;
* missing: the measurement's baseline is written and the test fails once, saying so, so that a
  reviewer commits it;
* present: the measurement is judged against it (a failure of only wall-clock gates confirmed by
  fresh measurements); under ``--sme2-update-baselines`` it is first merged into it, each
  quantity kept while within tolerance, each change listed;
* unused (no case of the suite reads it): listed at the session's end, and removed by an update
  over the whole suite (:func:`pytest_sme2.judge.unused_baselines.settle_unused`).

A disturbed measurement (other work took the CPU from its runs) never writes its machine class's
time record: a busy session is never the yardstick of quiet ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from pytest_sme2.judge.baseline import from_measurement
from pytest_sme2.judge.baseline_file import Stored
from pytest_sme2.judge.baseline_model import Baseline
from pytest_sme2.judge.baseline_update import merge
from pytest_sme2.judge.decision import Remeasure, failure_report, judge_confirmed
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import Judge
from pytest_sme2.judge.policy import Policy
from pytest_sme2.judge.time_gates import disturbed_reason
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Verdict


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
    stored: Stored,
    path: Path,
    expectations: Expectations,
    policy: Policy,
    remeasure: Remeasure | None,
) -> Decision:
    """Judge ``m`` against what the baseline file at ``path`` held (``stored``), and say what to
    write (see the module's docstring). A baseline just written has nothing to confirm, so only
    otherwise is a failure of time gates re-measured; under ``--sme2-strict`` a skipped gate
    fails too."""
    baseline, changes = stored.baseline, ()
    if stored.baseline is None or policy.update:
        new = from_measurement(m, policy.tolerances, policy.quantities)
        if disturbed := disturbed_reason(m, policy.judge_disturbed):
            new = replace(new, machines={})
        baseline, changes = merge(stored.baseline, new, policy.tolerances, policy.quantities)
        changes = (stored.set_aside, *changes) if stored.set_aside else changes
        if disturbed:
            changes = (*changes, f"[{m.device.class_id}] time record not written: {disturbed}")
    judge = Judge(policy, baseline, expectations)
    judgement = judge_confirmed(m, judge, None if changes else remeasure)
    failure = failure_report(judgement.verdicts, strict=policy.strict)
    if stored.baseline is None and not policy.update:
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
