"""What one pytest session of pytest-sme2 knows, in one object registered as the plugin:
:class:`Sme2Session` (as pytest-benchmark's BenchmarkSession and syrupy's SnapshotSession are to
theirs). Its methods are the session's hooks; the plugin's fixtures ask it for the case's values.

It holds the settings (resolved once, lazily: a session that runs no sme2 test never reads
them), the fleet, the history log, the cases collected, each test's outcome
(:class:`~pytest_sme2.records.outcome.CaseOutcome`: from this process, or from an xdist worker as
one payload on the test's report), the exports and builds finished, and at the end the baselines
no case uses and the session report model (:mod:`pytest_sme2.report.session_report`), which
report.md, the pytest-html summary and the terminal render. The work is the stage modules':
each hook is a few lines that hand it to them.

Nothing heavy is imported at module load: the plugin imports this module when pytest loads it.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sme2 import progress
from pytest_sme2.case_context import (
    OUTCOME_KEY,
    CaseContext,
    case_program,
    or_fail,
    outcome_of,
)
from pytest_sme2.lab.hooks import received
from pytest_sme2.progress import Finished
from pytest_sme2.records.outcome import CaseOutcome

if TYPE_CHECKING:
    from pytest_sme2.devices.base import Device
    from pytest_sme2.export.exporter import Artifact
    from pytest_sme2.judge.baseline_file import Stored
    from pytest_sme2.judge.check import Policy
    from pytest_sme2.judge.history import HistoryLog
    from pytest_sme2.judge.unused_baselines import UnusedBaselines
    from pytest_sme2.measure.fleet import Fleet
    from pytest_sme2.report.case_trend import CaseTrends
    from pytest_sme2.report.session_report import SessionReport
    from pytest_sme2.settings import Case, Settings

#: the key of what an xdist worker found, in its ``workeroutput``
_WORKER_FOUND = "sme2"


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


def start_progress(config: pytest.Config) -> None:
    """Progress lines (``pytest_sme2.progress``) to a duplicate of this process's stderr, taken
    now, while pytest captures nothing: a test's capture would swallow them. On an xdist worker
    that is the controller's stderr, so its lines reach the same terminal or log; plain lines
    there, as two workers cannot share one live line."""
    try:
        stream = os.fdopen(os.dup(2), "w", buffering=1, errors="replace")
    except OSError:  # no stderr at all (a daemon): the session runs without progress
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    progress.configure(
        stream, live=stream.isatty() and worker is None, prefix=f"[{worker}] " if worker else ""
    )

    def stop() -> None:
        progress.configure(None)
        stream.close()

    config.add_cleanup(stop)


class Sme2Session:
    """The session's state, registered as the plugin's session object; hooks are its methods,
    fixtures ask it (``Sme2Session.of(config)``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._settings: Settings | None = None
        self._fleet: Fleet | None = None
        self._history: HistoryLog | None = None
        self.trends: CaseTrends | None = None
        #: every case a test was parametrized with, by id (the same list for every test)
        self.cases: dict[str, Case] = {}
        #: some collected test was deselected (``-k``, ``-m``, ``--lf``…): not the whole suite
        self.deselected = False
        #: every test's outcome by node id, from this process or an xdist worker's reports
        self.outcomes: dict[str, CaseOutcome] = {}
        #: the exports and builds finished, in any of the session's processes
        self.exports: list[Finished] = []
        #: the baselines no case of the suite uses (merged over xdist's workers)
        self.unused: UnusedBaselines | None = None
        self.report: SessionReport | None = None
        #: the session report.md as written, or why it could not be (a full disk)
        self.written: Path | None = None
        self.write_error = ""
        self._history_found: tuple[Path | None, tuple[str, ...]] = (None, ())

    @staticmethod
    def of(config: pytest.Config) -> Sme2Session:
        return config.stash[SESSION_KEY]

    @property
    def worker(self) -> bool:
        """This process is an xdist worker: it measures, the controller reports."""
        return hasattr(self.config, "workerinput")

    @property
    def settings(self) -> Settings:
        """Settings resolved once per session. A bad value fails collection of the sme2 tests
        with one line naming the option; tests that use no sme2 fixture never resolve them."""
        from pytest_sme2.devices.kinds import DeviceKinds
        from pytest_sme2.interrupt import unwind_on_sigterm
        from pytest_sme2.settings import resolve

        config = self.config
        if self._settings is None:
            kinds = DeviceKinds.from_hook(config.hook)
            self._settings = or_fail(
                lambda: resolve(config.getoption, config.getini, config.rootpath, kinds)
            )
            _sweep_baselines(self._settings.baseline_dir)
            # a session that runs sme2 tests starts runners: SIGTERM must unwind it, not drop it
            # (an xdist controller installed it at configure time: installing again is a no-op)
            config.add_cleanup(unwind_on_sigterm())
        return self._settings

    @property
    def fleet(self) -> Fleet:
        """The session's devices, prepared on first use (runner built/provisioned once each)."""
        from pytest_sme2.measure.fleet import Fleet

        if self._fleet is None:
            config = self.config
            machine_info = partial(config.hook.pytest_sme2_update_machine_info, config=config)
            self._fleet = Fleet(lambda name: config.getoption(name, None), machine_info)
        return self._fleet

    @functools.cached_property
    def policy(self) -> Policy:
        """How this session judges: the options' policy, and the gates every plugin adds
        (``pytest_sme2_gates``), asked once."""
        found = self.config.hook.pytest_sme2_gates(config=self.config)
        gates = tuple(gate for gates in found for gate in gates)
        return replace(self.settings.policy, gates=gates)

    def baseline_path(self, case: Case) -> Path:
        """Where ``case``'s baseline is kept."""
        from pytest_sme2.judge.baseline import baseline_path

        device, model = case.device.baseline_directory, case.model.name
        return baseline_path(self.settings.baseline_dir, device, model, case.dtype, case.threads)

    def artifacts_dir(self, case: Case, basetemp: Path) -> Path:
        """Where ``case``'s traces, logs and reports go (``--sme2-artifacts``, else pytest's
        ``basetemp``), made."""
        root = self.settings.artifacts or basetemp / "sme2-artifacts"
        path = root / case.device.directory / case.stem
        path.mkdir(parents=True, exist_ok=True)
        return path

    def history_log(self) -> HistoryLog | None:
        """This session's (and xdist worker's) history file under ``--sme2-history``, opened on
        first use, else None; closed when the session ends.

        The commit is read once, from the git repository of the directory pytest was invoked in,
        else the rootdir's (``history.git_state`` says why in that order): with no git or no
        repository the records carry none and say why, and one warning says so; it never fails a
        test.
        """
        directory = self.settings.history
        if directory is None or self._history is not None:
            return self._history
        from pytest_sme2.judge.history import HistoryLog, HistoryWarning, git_state
        from pytest_sme2.report.case_trend import CaseTrends

        config = self.config
        git, warning = git_state(config.invocation_params.dir, config.rootpath)
        if warning:
            warnings.warn(HistoryWarning(warning), stacklevel=1)
        self._history = HistoryLog(directory, git, os.environ.get("PYTEST_XDIST_WORKER", "main"))
        self.trends = CaseTrends(directory, config.rootpath)
        return self._history

    def case_context(
        self,
        node: pytest.Item,
        case: Case,
        artifact: Artifact,
        device: Device,
        stored: Stored,
        reference: tuple[Path, Path],
        directory: Path,
    ) -> CaseContext:
        """Everything the test ``node`` measures and judges its ``case`` with, gathered once."""
        history = self.history_log()
        return CaseContext(
            node=node,
            case=case,
            settings=self.settings,
            policy=self.policy,
            program=case_program(case, artifact),
            device=device,
            fleet=self.fleet,
            baseline_path=self.baseline_path(case),
            stored=stored,
            directory=directory,
            reference=reference,
            speed=self.fleet.speed(case.device),
            history=history,
            trends=self.trends if history is not None else None,
            benchmarks=getattr(self.config, "_benchmarksession", None),
        )

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        from pytest_sme2.collection import parametrize

        if "sme2_case" in metafunc.fixturenames:
            self.cases.update(parametrize(metafunc, self.settings))

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups into the node ids
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        from pytest_sme2.collection import check_collected

        check_collected(self.config, items)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected = self.deselected or bool(items)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """Make the test's outcome final on its report: a measured test's files written (its
        report failed in one line where they cannot be), an unmeasured one's reason. The report
        that ends the test carries the outcome (``sme2_outcome``: one JSON payload, which
        crosses xdist)."""
        from pytest_sme2.case_files import unmeasured, write_case_files

        report = yield
        outcome = outcome_of(item)
        if outcome is None:
            return report
        if outcome.measurement is None:
            ended = unmeasured(call, report)
            outcome = replace(outcome, unmeasured=ended) if ended else outcome
        elif report.when == "call":
            outcome = write_case_files(
                outcome, report, config=self.config, settings=self.settings, trends=self.trends
            )
        item.stash[OUTCOME_KEY] = outcome
        if report.when == "call" or report.failed or report.skipped:
            report.sme2_outcome = outcome.to_json()
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """The outcome, before any reporter announces the test (or a SIGTERM on PASSED lost it)."""
        progress.terminal_written()  # the terminal reporter writes this report's letter
        if getattr(report, "sme2_outcome", None) is not None and not self.worker:
            self.outcomes[report.nodeid] = received(self.config, report)  # a remote's: moved

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        from pytest_sme2.report.html import header_cells

        cells[2:2] = header_cells()

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        """The test's summary row (the session report's) in the extra columns."""
        from pytest_sme2.report.html import row_cells
        from pytest_sme2.report.session_report import summary_cells

        outcome = self.outcomes.get(report.nodeid)
        cells[2:2] = row_cells(summary_cells(outcome) if outcome is not None else {})

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_html(self, report: pytest.TestReport, data: list[str]) -> None:
        """An unmeasured sme2 case's log opens on its one-line reason; a real error's traceback
        follows, collapsed (``data`` holds pytest-html's escaped log: traceback, then the
        captured sections)."""
        ended = (getattr(report, "sme2_outcome", None) or {}).get("unmeasured")
        if ended and (report.failed or hasattr(report, "wasxfail")):
            from pytest_sme2.report.html import unmeasured_log

            outcome, reason = ended
            data[:] = unmeasured_log(outcome, reason, report.longreprtext.strip(), data)

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str]) -> None:
        from pytest_sme2.report.html import summary_html

        prefix += summary_html(self.session_report())

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Find the baselines no case uses (removed as asked) and take the exports finished;
        an xdist worker sends both to the controller (:meth:`pytest_testnodedown`). The
        controller, or a session alone, writes the history page and the session report.md."""
        from pytest_sme2.session_end import find_unused, whole_suite

        if self.cases and whole_suite(self.settings, self.config, deselected=self.deselected):
            self._found(find_unused(self.settings, self.cases.values(), self.config, exitstatus))
        self.exports += progress.take_finished()
        if self._history is not None:
            self._history.close()
        if self.worker:
            self.config.workeroutput[_WORKER_FOUND] = {
                "unused": None if self.unused is None else self.unused.to_json(),
                "exports": [done.to_json() for done in self.exports],
            }
            return
        self._write_reports(session)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any) -> None:
        """An xdist worker ended (controller): take what it found at its session's end."""
        from pytest_sme2.judge.unused_baselines import UnusedBaselines

        found = (getattr(node, "workeroutput", None) or {}).get(_WORKER_FOUND)
        if found is None:
            return
        if found["unused"] is not None:
            self._found(UnusedBaselines.from_json(found["unused"]))
        self.exports += [Finished.from_json(done) for done in found["exports"]]

    def _found(self, unused: UnusedBaselines) -> None:
        """Keep the unused baselines found, merged with what other workers found."""
        self.unused = unused if self.unused is None else self.unused.merged(unused)

    def _write_reports(self, session: pytest.Session) -> None:
        """The history page into ``--sme2-history``, then the session report.md above the
        device folders, where some test wrote its files; a report.md that cannot be written
        fails the session in one line (its verdicts stand)."""
        from pytest_sme2.session_end import write_history_page, write_session_report

        if not any(outcome.case_report for outcome in self.outcomes.values()):
            return  # no test wrote its files: nothing to report on
        # (an xdist controller resolves the settings here: it collected nothing)
        if self.settings.history is not None:
            self._history_found = write_history_page(self.settings.history, self.config.rootpath)
        report = self.session_report()
        self.written, self.write_error = write_session_report(report)
        if self.write_error and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def session_report(self) -> SessionReport:
        """The session report model, built once the session has ended (its unused baselines
        found, its history page written), on first use."""
        from pytest_sme2.report.session_report import build_session_report

        if self.report is not None:
            return self.report
        page, problems = self._history_found
        self.report = build_session_report(
            (self.outcomes[nodeid] for nodeid in sorted(self.outcomes)),
            here=self.config.invocation_params.dir,
            unused=self.unused,
            exports=self.exports,
            history_page=page,
            history_problems=problems,
        )
        return self.report

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_sme2.report.terminal import summary

        said = summary(self.session_report(), written=self.written, error=self.write_error)
        for say in said:
            if say.heading:
                terminalreporter.section(say.text)
            else:
                terminalreporter.write_line(say.text, **({say.colour: True} if say.colour else {}))


SESSION_KEY: pytest.StashKey[Sme2Session] = pytest.StashKey()
