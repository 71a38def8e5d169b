"""One case's judging as an object: :class:`CaseCheck` holds what the case's fixtures gathered and
``check(measurement)`` does everything judging a case means — the gates (a failure of time gates
confirmed by a fresh measurement after the machine settled), the baseline written as asked, the
history record and pytest-benchmark's entries, or under ``--sme2-calibrate`` the calibration.

It returns what happened (:class:`Checked`) instead of acting on pytest: the plugin stashes it
for the reports and fails or skips the test. So this package needs no pytest, and a judging
rule is read here, in one place, not spread over fixture closures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from itertools import count
from pathlib import Path
from typing import Any

from pytest_sme2.judge.baseline_file import Stored, save
from pytest_sme2.judge.benchmark_entries import add_benchmarks
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.history import HistoryLog, HistoryRecord
from pytest_sme2.judge.lifecycle import decide
from pytest_sme2.judge.policy import Policy
from pytest_sme2.records.device import DeviceInfo
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Verdict


class NotJudged(Exception):
    """The case cannot be judged as asked (its message says why): the plugin skips the test."""


@dataclass(frozen=True)
class Checked:
    """What :meth:`CaseCheck.check` did, for the plugin to carry out in pytest."""

    verdicts: tuple[Verdict, ...]
    #: the measurement the verdicts judge (the confirming one, if taken); None for a calibration,
    #: which judges nothing
    measurement: Measurement | None
    #: one line per change written into the baseline file
    changes: tuple[str, ...]
    #: the test's junit user properties (name, value)
    properties: tuple[tuple[str, str], ...]
    #: the history record appended (``--sme2-history``)
    history: HistoryRecord | None = None
    #: the text the test fails with, None when it passes
    failure: str | None = None


@dataclass(frozen=True)
class CaseCheck:
    """Everything judging one case needs, gathered by its fixtures; :meth:`check` judges."""

    policy: Policy
    #: the case's baseline file, and what it held when the test started
    path: Path
    stored: Stored
    #: the test's expectations, read when judging: a marker applied since (``applymarker``) counts
    expectations: Callable[[], Expectations]
    #: ``measure(label)``: a fresh measurement of the case, its files under ``label``
    measure: Callable[[str], Measurement]
    #: ``settle(recorded_reference_ms)``: pause, and wait until the machine runs at its
    #: undisturbed speed (``measure.settle.settle_before_confirming``); returns how the fresh
    #: measurement is taken
    settle: Callable[[float | None], str]
    nodeid: str
    device_id: str
    artifacts: Path
    history: HistoryLog | None = None
    #: pytest-benchmark's session (``config._benchmarksession``), None without it
    benchmarks: Any = None
    #: numbers the fresh measurements confirming a failure, from 1 (the only state it keeps)
    _confirmations: Iterator[int] = field(default_factory=lambda: count(1), repr=False)

    def check(self, m: Measurement) -> Checked:
        """Judge ``m`` (or calibrate from it), write the baseline as asked, record it.

        A failure of only time-based gates (latency, shares, speedup, init time) counts only when
        fresh measurements spread in time fail too, each taken after a pause once the machine
        runs the reference workload at its undisturbed speed again
        (``decision.judge_confirmed``): a transient disturbance of a shared machine (seen: 1 of
        10 unchanged re-runs, twice; a bursty neighbour, 4 of 12) must not fail CI, a real
        regression persists.
        """
        if self.policy.calibrate_runs:
            return self._calibrate(m)
        policy = self.policy
        remeasure = partial(self._remeasure, m.device)
        decision = decide(m, self.stored, self.path, self.expectations(), policy, remeasure)
        if decision.baseline is not None:
            save(self.path, decision.baseline, policy.quantities)
        properties = [("sme2 baseline change", change) for change in decision.changes]
        if decision.remeasured_after is not None:
            properties.insert(0, ("sme2 re-measured after", decision.remeasured_after))
        record = None
        if self.history is not None:
            record = self.history.record(
                decision.measurement,
                decision.verdicts,
                device=self.device_id,
                nodeid=self.nodeid,
                artifacts=self.artifacts,
            )
        add_benchmarks(self.benchmarks, self.nodeid, decision.measurement)
        return Checked(
            decision.verdicts,
            decision.measurement,
            decision.changes,
            tuple(properties),
            record,
            decision.failure,
        )

    def _remeasure(self, device: DeviceInfo) -> tuple[Measurement, str]:
        """A fresh measurement, after a pause and once the machine settled where that can be told;
        its files under ``confirm``, ``confirm-2``, … in the order taken."""
        baseline = self.stored.baseline
        record = baseline.record_for(device) if baseline is not None else None
        how = self.settle(record.reference_fastest_ms if record is not None else None)
        taken = next(self._confirmations)
        return self.measure(f"confirm-{taken}" if taken > 1 else "confirm"), how

    def _calibrate(self, m: Measurement) -> Checked:
        """``--sme2-calibrate=N``: N unchanged measurements → the latency gate's noise, stored."""
        from pytest_sme2.judge.calibration import calibrate, not_calibrated_reason

        reason = not_calibrated_reason(m.device)
        if reason is not None:
            raise NotJudged(reason)
        runs = self.policy.calibrate_runs
        measurements = [m, *(self.measure(f"calibrate-{i}") for i in range(1, runs))]
        when = datetime.now(UTC).isoformat(timespec="seconds")
        result = calibrate(
            measurements, self.stored.baseline, self.policy, path=self.path, when=when
        )
        save(self.path, result.baseline, self.policy.quantities)
        return Checked((), None, (result.summary,), (("sme2 calibration", result.summary),))
