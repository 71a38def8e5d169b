"""What one pytest session of pytest-sme2 knows, in one object: :class:`Sme2Session`, made at
configure time and kept in ``config.stash``. The plugin's hooks and fixtures are a few lines each
that ask it (as syrupy's SnapshotSession and pytest-benchmark's BenchmarkSession are to theirs).

It holds the settings (resolved once, lazily: a session that runs no sme2 test never reads
them), the fleet, the history log, the cases collected, and at the end the baselines no case uses.
Per test, :class:`CaseMeasure` and :class:`CaseJudge` are what ``sme2_measure`` and ``sme2_judge``
return: callables carrying the stage modules' results into pytest (stash, fail, skip).

Nothing heavy is imported at module load: the plugin imports this module when pytest loads it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sme2.keys import (
    ARTIFACTS_DIR_KEY,
    BASELINE_CHANGES_KEY,
    HISTORY_KEY,
    MEASUREMENT_KEY,
    PROGRAM_KEY,
    RUNS_DIR,
    SETTINGS_KEY,
    UNUSED_BASELINES_KEY,
    VERDICTS_KEY,
)

if TYPE_CHECKING:
    from pytest_sme2.devices.base import Device
    from pytest_sme2.devices.spec import DeviceSpec
    from pytest_sme2.export.exporter import Artifact
    from pytest_sme2.judge.check import CaseCheck
    from pytest_sme2.judge.expectations import Expectations
    from pytest_sme2.judge.history import HistoryLog
    from pytest_sme2.judge.unused_baselines import UnusedBaselines
    from pytest_sme2.measure.deadline import Deadline
    from pytest_sme2.measure.fleet import Fleet
    from pytest_sme2.measure.plan import MeasurePlan
    from pytest_sme2.measure.settle import MachineSpeed
    from pytest_sme2.records.measurement import Measurement
    from pytest_sme2.records.verdict import Verdict
    from pytest_sme2.settings import Case, Settings

#: the key of the unused baselines in an xdist worker's ``workeroutput``
_WORKER_UNUSED = "sme2_unused_baselines"


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


def test_id(item: pytest.Item) -> str:
    """The test function's node id, without the parametrization of this item."""
    name = getattr(item, "originalname", item.name)
    return f"{item.parent.nodeid}::{name}" if item.parent is not None else item.nodeid


def expectations(node: pytest.Item) -> Expectations:
    """Expectations from every ``sme2`` marker on the test, the closest marker winning per key,
    then the case's model's own (``register_model(expect=...)``) over them; a ConfigError naming
    the test (or model), the keyword and the value for a mistake."""
    from pytest_sme2.errors import ConfigError
    from pytest_sme2.judge.expectations import Expectations

    kwargs: dict[str, Any] = {}
    for marker in reversed(list(node.iter_markers("sme2"))):
        if marker.args:
            raise ConfigError(
                f"{test_id(node)}: @pytest.mark.sme2{marker.args!r}: takes keyword arguments only"
            )
        kwargs.update(marker.kwargs)
    case = case_of(node)
    where = f"{test_id(node)}: @pytest.mark.sme2"
    if case is not None and case.model.expectations(case.dtype):
        kwargs.update(case.model.expectations(case.dtype))
        where += f" with register_model({case.model.name!r}, expect=...)"
    try:
        return Expectations.from_marker(kwargs)
    except ConfigError as err:
        raise ConfigError(f"{where} {err}") from None


def choose_loadgroup(config: pytest.Config) -> None:
    """With ``-n N`` and no ``--dist``, distribute by device group (``--dist loadgroup``) when the
    fleet has a device whose time is real: its cases must never run two at once.

    xdist's workers parse the same arguments, with ``-n`` reset: each takes the same decision
    from them, so that its node ids carry the groups the controller schedules by.
    """
    from pytest_sme2.devices.kinds import DeviceKinds
    from pytest_sme2.errors import ConfigError
    from pytest_sme2.measure.fleet import xdist_group
    from pytest_sme2.settings import fleet_specs

    worker = hasattr(config, "workerinput")
    chosen = any(arg.split("=")[0] == "--dist" for arg in config.invocation_params.args)
    if chosen or not (worker or getattr(config.option, "numprocesses", None)):
        return
    try:
        specs = fleet_specs(config.getoption, config.getini, DeviceKinds.from_hook(config.hook))
    except ConfigError:
        return  # said once, when the tests are collected
    if any(xdist_group(spec) for spec in specs):
        if worker:
            config.option.loadgroup = True
        else:
            config.option.dist = "loadgroup"


def _sweep_baselines(directory: Path) -> None:
    """Remove what a killed session left in the baselines (``cache.sweep_stranded``), said as
    a warning: ``git add baselines/`` must never commit a half-way file."""
    from pytest_sme2.cache import sweep_stranded

    for path in sweep_stranded(directory):
        warnings.warn(
            f"pytest-sme2 removed {path}: a temporary file of a session killed while it wrote "
            "the baseline (the baseline itself is as it was before)",
            stacklevel=1,
        )


class Sme2Session:
    """The session's state; hooks and fixtures ask it (``Sme2Session.of(config)``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._fleet: Fleet | None = None
        self.history: HistoryLog | None = None
        #: every case a test was parametrized with, by id (the same list for every test)
        self.cases: dict[str, Case] = {}
        #: some collected test was deselected (``-k``, ``-m``, ``--lf``…): not the whole suite
        self.deselected = False

    @staticmethod
    def of(config: pytest.Config) -> Sme2Session:
        return config.stash[SESSION_KEY]

    @property
    def settings(self) -> Settings:
        """Settings resolved once per session. A bad value fails collection of the sme2 tests
        with one line naming the option; tests that use no sme2 fixture never resolve them."""
        from pytest_sme2.devices.kinds import DeviceKinds
        from pytest_sme2.interrupt import unwind_on_sigterm
        from pytest_sme2.settings import resolve

        config = self.config
        if SETTINGS_KEY not in config.stash:
            settings = config.stash[SETTINGS_KEY] = or_fail(
                lambda: resolve(
                    config.getoption,
                    config.getini,
                    config.rootpath,
                    DeviceKinds.from_hook(config.hook),
                )
            )
            _sweep_baselines(settings.baseline_dir)
            # a session that runs sme2 tests starts runners: SIGTERM must unwind it, not drop it
            # (an xdist controller installed it at configure time: installing again is a no-op)
            config.add_cleanup(unwind_on_sigterm())
        return config.stash[SETTINGS_KEY]

    @property
    def fleet(self) -> Fleet:
        """The session's devices, prepared on first use (runner built/provisioned once each)."""
        from pytest_sme2.measure.fleet import Fleet

        if self._fleet is None:
            config = self.config
            machine_info = partial(config.hook.pytest_sme2_update_machine_info, config=config)
            self._fleet = Fleet(lambda name: config.getoption(name, None), machine_info)
        return self._fleet

    def parametrize(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize a test that asks for ``sme2_case`` over model × dtype (× threads), and
        over each registered program (``register_program``: one case, its label as dtype)."""
        from pytest_sme2.export.model_spec import registered_models
        from pytest_sme2.export.program_files import registered_programs

        settings = self.settings
        cases = or_fail(lambda: settings.cases((*registered_models(), *registered_programs())))
        self.cases.update((case.id, case) for case in cases)
        metafunc.parametrize("sme2_case", cases, ids=[case.id for case in cases])

    def check_collected(self, items: list[pytest.Item]) -> None:
        """Check every test's ``sme2`` markers, and group each real device's cases.

        A marker mistake (a misspelt keyword, a share given as text) is a collection error naming
        the test, the keyword and the value, and the test is dropped: found before anything is
        exported or measured, not as a traceback after minutes of emulation. One worker owns one
        real device: its cases form one xdist group (``--dist loadgroup``), so no two of them
        ever run at once; an emulated device's cases may spread.
        """
        from pytest_sme2.errors import ConfigError
        from pytest_sme2.measure.fleet import xdist_group

        reported: set[str] = set()
        kept = []
        for item in items:
            try:
                expectations(item)
            except ConfigError as err:
                test = test_id(item)  # one line per test function, not per parametrized case
                if test not in reported:
                    reported.add(test)
                    self.config.hook.pytest_collectreport(
                        report=pytest.CollectReport(test, "failed", str(err), [])
                    )
                continue
            kept.append(item)
            case = case_of(item)
            group = xdist_group(case.device) if case is not None else None
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
        items[:] = kept

    def export_collected(self, items: list[pytest.Item]) -> None:
        """Every collected case exported before the session's first measurement (``prefetch``);
        a registered program has nothing to export."""
        from pytest_sme2.export.prefetch import biggest_first, prefetch
        from pytest_sme2.export.program_files import ProgramSpec
        from pytest_sme2.export.reference import REFERENCE

        cases = [case for case in map(case_of, items) if case is not None]
        if not cases:
            return
        exported = [case for case in cases if not isinstance(case.model, ProgramSpec)]
        # every measurement times the reference workload beside its case (``sme2_reference``)
        # xdist workers collect the same cases: each starts at its own offset of one order
        # (biggest graphs first, as a session alone exports), so two workers export different
        # cases side by side instead of queueing on one case's lock.
        pairs = biggest_first(
            dict.fromkeys([*((case.model, case.dtype) for case in exported), (REFERENCE, "fp32")])
        )
        worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        start = len(pairs) * worker // workers
        # one session alone exports on every core (its measurements then run alone); xdist's
        # workers already export side by side
        processes = (os.cpu_count() or 1) if "PYTEST_XDIST_WORKER" not in os.environ else 1
        prefetch(pairs[start:] + pairs[:start], processes=processes)

    def open_history(self) -> HistoryLog | None:
        """This session's (and xdist worker's) history file under ``--sme2-history``, else None.

        The commit is read once, from the git repository of the directory pytest was invoked in,
        else the rootdir's (``history.git_state`` says why in that order): with no git or no
        repository the records carry none and say why, and one warning says so; it never fails a
        test.
        """
        if self.settings.history is None:
            return None
        from pytest_sme2.judge.history import HistoryLog, HistoryWarning, git_state

        config = self.config
        git, warning = git_state(config.invocation_params.dir, config.rootpath)
        if warning:
            warnings.warn(HistoryWarning(warning), stacklevel=1)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.history = HistoryLog(self.settings.history, git, worker)
        return self.history

    def whole_suite(self) -> bool:
        """Whether this session collected every case of the suite: only then is a baseline no
        case uses known to be unused. Not with ``--sme2-models``/``--sme2-dtypes``, ``-k``,
        ``-m`` or any other deselection."""
        settings, option = self.settings, self.config.option
        subset = settings.models or settings.dtypes or self.deselected
        return not (subset or getattr(option, "keyword", "") or getattr(option, "markexpr", ""))

    def finish(self, exitstatus: int) -> None:
        """At the session's end: find the baselines no collected case uses; under
        ``--sme2-update-baselines`` over the whole suite (and not ``--collect-only``, nor an
        interrupted session, nor one that named its test files), remove them. An xdist worker sends
        what it found to the controller, which collects nothing itself (:meth:`worker_finished`)."""
        from pytest_sme2.judge.baseline import baseline_path
        from pytest_sme2.judge.unused_baselines import UnusedBaselines, unused_baselines

        if not self.cases or not self.whole_suite():
            return
        settings = self.settings
        used = {
            baseline_path(
                settings.baseline_dir, c.device.directory, c.model.name, c.dtype, c.threads
            )
            for c in self.cases.values()
        }
        # a headline-only device (auto's emulated one) runs a subset of its dtypes, as under
        # --sme2-dtypes: its other baselines are not unused, and never removed
        folders = [
            settings.baseline_dir / device.directory
            for device in settings.devices
            if not device.headline_only
        ]
        paths = unused_baselines(folders, used, settings.threads)
        update = settings.update_baselines and not self.config.option.collectonly
        update = update and exitstatus != pytest.ExitCode.INTERRUPTED
        # files named on the command line: a module that registers models may be left out
        named = self.config.args_source is pytest.Config.ArgsSource.ARGS
        remove = update and not named
        for path in paths if remove else ():
            path.unlink(missing_ok=True)  # xdist's workers each remove: the first one does
        self._found(UnusedBaselines(paths, remove, withheld=update and named))

    def worker_finished(self, workeroutput: dict[str, Any] | None) -> None:
        """An xdist worker ended: take the unused baselines it found."""
        from pytest_sme2.judge.unused_baselines import UnusedBaselines

        found = (workeroutput or {}).get(_WORKER_UNUSED)
        if found is not None:
            self._found(UnusedBaselines.from_json(found))

    def _found(self, unused: UnusedBaselines) -> None:
        """Keep what was found for the terminal summary (merged with what other workers found),
        and on an xdist worker hand it to the controller."""
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[_WORKER_UNUSED] = unused.to_json()
        known = self.config.stash.get(UNUSED_BASELINES_KEY, None)
        self.config.stash[UNUSED_BASELINES_KEY] = unused if known is None else known.merged(unused)


SESSION_KEY: pytest.StashKey[Sme2Session] = pytest.StashKey()


@dataclass(frozen=True)
class CaseMeasure:
    """What ``sme2_measure`` returns: ``sme2_measure(label)`` measures the current case afresh,
    its files under ``label``, and leaves the measurement in the test's stash for the reports."""

    node: pytest.Item
    case: Case
    artifact: Artifact
    device: Device
    settings: Settings
    directory: Path
    reference: tuple[Path, Path]
    speed: MachineSpeed
    fleet: Fleet
    #: each runner call's deadline, from the case's baseline (``judge.deadlines``)
    deadline: Deadline

    def __call__(self, label: str) -> Measurement:
        from pytest_sme2.report.kit_json import Program

        result = or_fail(lambda: self._measure(label))
        self.node.stash[MEASUREMENT_KEY] = result
        self.node.stash[ARTIFACTS_DIR_KEY] = self.directory
        self.node.stash[PROGRAM_KEY] = Program(self.artifact.pte, self.artifact.etrecord)
        self.speed.observe(result)
        return result

    def _measure(self, label: str) -> Measurement:
        from pytest_sme2.export.program_files import ProgramSpec
        from pytest_sme2.measure.case import measure
        from pytest_sme2.measure.plan import CaseProgram
        from pytest_sme2.quiet import quiet_libraries

        case, artifact, settings = self.case, self.artifact, self.settings
        program = case.model
        measured = CaseProgram(
            model=program.name,
            dtype=case.dtype,
            pte=artifact.pte,
            inputs=artifact.inputs,
            etrecord=artifact.etrecord,
            expected_outputs=artifact.expected_outputs,
            numerics=artifact.numerics,
            tokens=program.tokens_per_inference,
            parity_tolerance=program.tolerance if isinstance(program, ProgramSpec) else None,
        )
        # a lost device fails its remaining cases; executorch's deprecations (re-timing an
        # ETDump) are logged, not put in the user's warnings summary
        with self.fleet.using(case.device), quiet_libraries():
            return measure(
                self.device,
                measured,
                self._plan(),
                self.directory / RUNS_DIR / label,
                classifier=settings.classifier,
                reference=self.reference,
                deadline=self.deadline,
            )

    def _plan(self) -> MeasurePlan:
        """The session's plan on the case's thread count; the 1-thread runs timed alongside
        where the test's marker sets a thread-gain floor for that count (``judge.thread_gates``)."""
        threads = self.case.threads
        gain_floor = expectations(self.node).thread_gain_floor(threads)
        return replace(self.settings.plan, threads=threads, with_one_thread=gain_floor is not None)


@dataclass(frozen=True)
class CaseJudge:
    """What ``sme2_judge`` returns: ``sme2_judge(measurement)`` (or ``.check(measurement)``)
    judges the case (``judge.check.CaseCheck``), leaves the outcome in the test's stash and junit
    properties for the reports, and fails the test with reviewer sentences when a gate fails (or
    is skipped under --sme2-strict), or skips it when the case cannot be judged as asked."""

    node: pytest.Item
    case: CaseCheck

    def check(self, measurement: Measurement) -> tuple[Verdict, ...]:
        from pytest_sme2.judge.check import NotJudged

        try:
            checked = or_fail(lambda: self.case.check(measurement))
        except NotJudged as why:
            reason = str(why)
        else:
            node = self.node
            if checked.measurement is not None:
                node.stash[MEASUREMENT_KEY] = checked.measurement
                node.stash[VERDICTS_KEY] = checked.verdicts
            node.stash[BASELINE_CHANGES_KEY] = (self.case.path, checked.changes)
            node.user_properties += checked.properties
            if checked.history is not None:
                node.stash[HISTORY_KEY] = checked.history
            if checked.failure:
                pytest.fail(checked.failure, pytrace=False)
            return checked.verdicts
        pytest.skip(reason)

    __call__ = check
