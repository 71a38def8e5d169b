"""One test of a case as values: :class:`CaseContext`, built once per test by the session from the
case's fixtures, and what ``sme2_measure`` and ``sme2_judge`` return over it (:class:`CaseMeasure`,
:class:`CaseJudge`): callables that run the stage modules and carry their results into pytest —
the test's outcome (:class:`~pytest_sme2.records.outcome.CaseOutcome`, one stash key), a failure,
a skip.

Also the few pytest-facing helpers every fixture and hook shares: a user's error as one line
(:func:`or_fail`), the case of an item, the expectations of its markers.

Nothing heavy is imported at module load: the plugin imports this module when pytest loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sme2.records.outcome import CaseOutcome

if TYPE_CHECKING:
    from pytest_sme2.devices.base import Device
    from pytest_sme2.devices.spec import DeviceSpec
    from pytest_sme2.export.exporter import Artifact
    from pytest_sme2.judge.baseline_file import Stored
    from pytest_sme2.judge.check import CaseCheck, Policy
    from pytest_sme2.judge.expectations import Expectations
    from pytest_sme2.judge.history import HistoryLog
    from pytest_sme2.measure.deadline import Deadline
    from pytest_sme2.measure.fleet import Fleet
    from pytest_sme2.measure.plan import CaseProgram, MeasurePlan
    from pytest_sme2.measure.settle import MachineSpeed
    from pytest_sme2.records.measurement import Measurement
    from pytest_sme2.records.verdict import Verdict
    from pytest_sme2.report.case_trend import CaseTrends
    from pytest_sme2.settings import Case, Settings

#: the folder of a test's run directory that holds the runner's own files (rounds, traced and
#: evidence runs): a dot-folder beside the kit's experiment folders, out of the way of its tools
RUNS_DIR = ".sme2-runs"

#: the test's outcome, filled in as it goes (:meth:`CaseContext.record`)
OUTCOME_KEY: pytest.StashKey[CaseOutcome] = pytest.StashKey()


def or_fail(call: Callable[[], Any]) -> Any:
    """``call()``; a user-caused error fails the test (or collection) with its one-line message.

    The failure is raised outside the ``except`` block so pytest shows the message once, not
    chained to the error it replaces.
    """
    from pytest_sme2.errors import Sme2Error

    try:
        return call()
    except Sme2Error as err:
        message = str(err)
    pytest.fail(message, pytrace=False)


def prepared_device(fleet: Fleet, spec: DeviceSpec) -> Device:
    """``spec``'s prepared device; where it cannot be prepared, its case fails in one line — or,
    for a device the user did not name (``auto``'s emulated one, on a machine that cannot
    provision it), is skipped saying why and how to leave it out."""
    if not spec.added_by:
        return or_fail(lambda: fleet.device(spec))
    from pytest_sme2.errors import Sme2Error

    try:
        return fleet.device(spec)
    except Sme2Error as err:
        message = f"{spec.id} could not be prepared: {err} ({spec.added_by}; --sme2-device=host "
        message += "measures the host alone)"
    pytest.skip(message)


def case_of(item: pytest.Item) -> Case | None:
    """The item's ``sme2_case`` parameter, None for a test that takes none."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("sme2_case") if callspec is not None else None


def new_outcome(item: pytest.Item, case: Case) -> CaseOutcome:
    """The outcome of ``item``'s ``case`` before anything happened to it."""
    return CaseOutcome(item.nodeid, case.device.id, case.model.name, case.dtype, case.threads)


def outcome_of(item: pytest.Item) -> CaseOutcome | None:
    """The item's outcome so far: what its fixtures recorded, else its case's; None for a test
    that takes no case."""
    if OUTCOME_KEY in item.stash:
        return item.stash[OUTCOME_KEY]
    case = case_of(item)
    return None if case is None else new_outcome(item, case)


def test_id(item: pytest.Item) -> str:
    """The test function's node id, without the parametrization of this item."""
    name = getattr(item, "originalname", item.name)
    return f"{item.parent.nodeid}::{name}" if item.parent is not None else item.nodeid


def expectations(node: pytest.Item) -> Expectations:
    """The test's expectations: its ``sme2`` markers' and its case's model's
    (:func:`merged_expectations`)."""
    return merged_expectations(list(node.iter_markers("sme2")), case_of(node), test_id(node))


def merged_expectations(marks: Sequence[pytest.Mark], case: Case | None, test: str) -> Expectations:
    """Expectations from every ``sme2`` marker of ``test`` (``marks``, closest first), the
    closest marker winning per key, then the case's model's own (``register_model(expect=...)``)
    over them; a ConfigError naming the test (or model), the keyword and the value for a
    mistake."""
    from pytest_sme2.errors import ConfigError
    from pytest_sme2.judge.expectations import Expectations

    kwargs: dict[str, Any] = {}
    for mark in reversed(marks):
        if mark.args:
            raise ConfigError(
                f"{test}: @pytest.mark.sme2{mark.args!r}: takes keyword arguments only"
            )
        kwargs.update(mark.kwargs)
    where = f"{test}: @pytest.mark.sme2"
    if case is not None and case.model.expectations(case.dtype):
        kwargs.update(case.model.expectations(case.dtype))
        where += f" with register_model({case.model.name!r}, expect=...)"
    try:
        return Expectations.from_marker(kwargs)
    except ConfigError as err:
        raise ConfigError(f"{where} {err}") from None


def case_program(case: Case, artifact: Artifact) -> CaseProgram:
    """The case's program as a measurement takes it: the export's files and what its outputs are
    checked against (a registered program's own parity tolerance)."""
    from pytest_sme2.export.program_files import ProgramSpec
    from pytest_sme2.measure.plan import CaseProgram

    model = case.model
    return CaseProgram(
        model=model.name,
        dtype=case.dtype,
        pte=artifact.pte,
        inputs=artifact.inputs,
        etrecord=artifact.etrecord,
        expected_outputs=artifact.expected_outputs,
        numerics=artifact.numerics,
        tokens=model.tokens_per_inference,
        parity_tolerance=model.tolerance if isinstance(model, ProgramSpec) else None,
    )


@dataclass(frozen=True)
class CaseContext:
    """Everything one test of a case measures and judges with, gathered once (``sme2_context``)."""

    node: pytest.Item
    case: Case
    settings: Settings
    #: how the session judges: the options, and the gates plugins add
    policy: Policy
    program: CaseProgram
    device: Device
    fleet: Fleet
    #: the case's baseline file, and what it held when the test started
    baseline_path: Path
    stored: Stored
    #: the case's run directory: the runner's files under ``.sme2-runs/<label>``, then the reports
    directory: Path
    #: the reference workload's program and inputs, timed beside the case (machine speed)
    reference: tuple[Path, Path]
    speed: MachineSpeed
    history: HistoryLog | None = None
    #: the records the case's trend is drawn from, under ``--sme2-history``
    trends: CaseTrends | None = None
    #: pytest-benchmark's session (``config._benchmarksession``), None without it
    benchmarks: Any = field(default=None, repr=False)

    def record(self, **changes: Any) -> CaseOutcome:
        """The test's outcome with ``changes``, kept on its item (the session's reports read it
        there when the test's report is made)."""
        node = self.node
        outcome = node.stash.get(OUTCOME_KEY, None) or new_outcome(node, self.case)
        node.stash[OUTCOME_KEY] = replace(outcome, **changes)
        return node.stash[OUTCOME_KEY]

    @property
    def deadline(self) -> Deadline:
        """Each runner call's deadline, from the case's baseline (``Stored.deadline``)."""
        return self.stored.deadline(self.device.info(), self.settings.plan.timeout_s)

    def plan(self) -> MeasurePlan:
        """The session's plan on the case's thread count; the 1-thread runs timed alongside
        where the test's marker sets a thread-gain floor for that count (``judge.thread_gates``)."""
        threads = self.case.threads
        gain_floor = expectations(self.node).thread_gain_floor(threads)
        return replace(self.settings.plan, threads=threads, with_one_thread=gain_floor is not None)

    def measure(self, label: str) -> Measurement:
        """The case measured afresh, its runner's files under ``label``. A lost device fails its
        remaining cases; executorch's deprecations (re-timing an ETDump) are logged, not put in
        the user's warnings summary."""
        from pytest_sme2.measure.case import measure
        from pytest_sme2.quiet import quiet_libraries

        with self.fleet.using(self.case.device), quiet_libraries():
            return measure(
                self.device,
                self.program,
                self.plan(),
                self.directory / RUNS_DIR / label,
                classifier=self.settings.classifier,
                reference=self.reference,
                deadline=self.deadline,
            )

    def settle(self, recorded_reference_ms: float | None) -> str:
        """Wait, before a confirming measurement, until the machine runs at its undisturbed speed
        (``measure.settle``); how the fresh measurement is taken."""
        from pytest_sme2.measure.settle import settle_before_confirming

        return settle_before_confirming(
            self.device,
            self.reference,
            self.speed,
            recorded_reference_ms,
            self.directory / "confirm",
            threads=self.case.threads,
        )

    def check(self, measure: Callable[[str], Measurement]) -> CaseCheck:
        """The case's judging (``judge.check``); a confirming measurement is ``measure``'s."""
        from pytest_sme2.judge.check import CaseCheck

        node = self.node
        return CaseCheck(
            self.policy,
            self.baseline_path,
            self.stored,
            # checked at collection; a marker applied since (request.applymarker) only now
            expectations=lambda: expectations(node),
            measure=measure,
            settle=self.settle,
            nodeid=node.nodeid,
            device_id=self.case.device.id,
            artifacts=self.directory,
            history=self.history,
            benchmarks=self.benchmarks,
        )


@dataclass(frozen=True)
class CaseMeasure:
    """What ``sme2_measure`` returns: ``sme2_measure(label)`` measures the current case afresh,
    its files under ``label``, and records the measurement in the test's outcome."""

    context: CaseContext

    def __call__(self, label: str) -> Measurement:
        context = self.context
        result = or_fail(lambda: context.measure(label))
        context.record(
            measurement=result,
            run_dir=context.directory,
            pte=context.program.pte,
            etrecord=context.program.etrecord,
        )
        context.speed.observe(result)
        return result


@dataclass(frozen=True)
class CaseJudge:
    """What ``sme2_judge`` returns: ``sme2_judge(measurement)`` (or ``.check(measurement)``)
    judges the case (``judge.check.CaseCheck``), records the verdicts and the baseline's changes
    in the test's outcome and its junit properties, and fails the test with reviewer sentences
    when a gate fails (or is skipped under --sme2-strict), or skips it when the case cannot be
    judged as asked."""

    context: CaseContext
    case: CaseCheck

    def check(self, measurement: Measurement) -> tuple[Verdict, ...]:
        from pytest_sme2.judge.check import NotJudged

        try:
            checked = or_fail(lambda: self.case.check(measurement))
        except NotJudged as why:
            reason = str(why)
        else:
            node, trends = self.context.node, self.context.trends
            changes: dict[str, Any] = {
                "baseline": self.context.baseline_path,
                "baseline_changes": checked.changes,
            }
            if checked.measurement is not None:
                changes |= {
                    "measurement": checked.measurement,
                    "verdicts": checked.verdicts,
                    "run_dir": self.context.directory,
                }
            if checked.history is not None and trends is not None:
                changes["history_anchor"] = trends.add(checked.history)
            self.context.record(**changes)
            node.user_properties += checked.properties
            if checked.failure:
                pytest.fail(checked.failure, pytrace=False)
            return checked.verdicts
        pytest.skip(reason)

    __call__ = check
