"""pytest hooks that present results: per-test artifacts + report.md + pytest-html extras after
each measured test, extra result-table columns, and the session report.md.

The plugin registers one ``ReportPlugin`` per session at configure time. It reads what the
fixtures left in the item's stash (measurement, verdicts); nothing here measures or judges.
Under pytest-xdist the workers write the per-test files and the controller writes the session
report, reloading each remote test's case record from its ``manifest.json`` (the report
attribute ``sme2_artifacts`` carries the directory across processes): the record is lossless, so
the session report says the same with and without xdist.
"""

from __future__ import annotations

import functools
import html
import os
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sme2.cache import write_atomic
from pytest_sme2.keys import (
    ARTIFACTS_DIR_KEY,
    BASELINE_CHANGES_KEY,
    HISTORY_KEY,
    MEASUREMENT_KEY,
    PROGRAM_KEY,
    SETTINGS_KEY,
    UNUSED_BASELINES_KEY,
    VERDICTS_KEY,
)
from pytest_sme2.progress import Finished

if TYPE_CHECKING:
    from pytest_sme2.judge.history import HistoryRecord
    from pytest_sme2.report.markdown import SessionEntry
    from pytest_sme2.report.scaling_view import ScalingView


def _series_key(record: HistoryRecord) -> tuple[str, str, str, int]:
    m = record.measurement
    return (record.device, m.model, m.dtype, m.threads)


class ReportPlugin:
    """Per-session state: the tests measured in this process and every test's artifact dir."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.local: dict[str, tuple[Any, tuple[Any, ...]]] = {}  # nodeid → (measurement, verdicts)
        self.dirs: dict[str, Path] = {}  # nodeid → artifact dir, from this process or xdist workers
        self.session_report: Path | None = None
        self.session_report_error = ""  # why report.md could not be written (a full disk)
        # Terminal rows travel on the test reports, so the xdist controller gets them too.
        self.summary_rows: list[dict[str, str]] = []
        self.skipped: set[str] = set()
        self.baseline_changes: list[tuple[str, tuple[str, ...]]] = []  # (path, changes)
        self.untimed: Counter[str] = Counter()  # machine class → cases with no time record
        # --sme2-history: its records, read on the first judged case and then kept up to date
        self.history: list[HistoryRecord] | None = None
        self.history_page: Path | None = None
        self.history_problems: tuple[str, ...] = ()
        # sme2 cases that ended without a measurement: (nodeid, outcome, one-line reason)
        self.unmeasured: list[tuple[str, str, str]] = []
        self.exports: list[Finished] = []  # long work finished in this session, any process
        self._start_progress()

    def _start_progress(self) -> None:
        """Progress lines (``pytest_sme2.progress``) to a duplicate of this process's stderr,
        taken now, while pytest captures nothing: a test's capture would swallow them. On an
        xdist worker that is the controller's stderr, so its lines reach the same terminal or
        log; plain lines there, as two workers cannot share one live line."""
        from pytest_sme2 import progress

        try:
            stream = os.fdopen(os.dup(2), "w", buffering=1, errors="replace")
        except OSError:  # no stderr at all (a daemon): the session runs without progress
            return
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        progress.configure(
            stream,
            live=stream.isatty() and worker is None,
            prefix=f"[{worker}] " if worker else "",
        )

        def stop() -> None:
            progress.configure(None)
            stream.close()

        self.config.add_cleanup(stop)

    def _manifest_config(self, item: pytest.Item, threads: int) -> dict[str, Any]:
        """The settings that shaped this measurement, for manifest.json."""
        config: dict[str, Any] = {"nodeid": item.nodeid}
        settings = self.config.stash.get(SETTINGS_KEY, None)
        case = getattr(item, "callspec", None) and item.callspec.params.get("sme2_case")
        if settings is not None and case is not None:
            config |= {
                "device": case.device.id,
                **asdict(settings.plan),
                "threads": threads,
                "tolerances": asdict(settings.tolerances),
                "baseline_dir": str(settings.baseline_dir),
                "update_baselines": settings.update_baselines,
                "strict": settings.strict,
            }
        return config

    def _href(self, path: Path) -> str:
        """A link from the HTML report to ``path``: relative to the report file when there is
        one (the pair stays valid when copied together), else an absolute file URI."""
        html_path = getattr(self.config.option, "htmlpath", None)
        if html_path:
            return os.path.relpath(path.resolve(), Path(html_path).resolve().parent)
        return path.resolve().as_uri()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        from pytest_sme2 import progress

        report = yield
        finished = progress.take_finished()  # the exports this test's setup ran (prefetch)
        if finished:
            report.sme2_exports = [done.to_json() for done in finished]
        self._explain_unmeasured(item, call, report)
        if report.when != "call" or MEASUREMENT_KEY not in item.stash:
            return report
        from pytest_sme2.report.artifacts import write_artifacts
        from pytest_sme2.report.charts import render_charts
        from pytest_sme2.report.content import skipped_reasons, summary_row, untimed_class
        from pytest_sme2.report.html import extra_html, row_cells

        m = item.stash[MEASUREMENT_KEY]
        verdicts = item.stash.get(VERDICTS_KEY, ())
        charts = render_charts(m)
        links: list[tuple[str, str]] = []
        directory = item.stash.get(ARTIFACTS_DIR_KEY, None)
        if directory is not None:
            try:
                written = write_artifacts(
                    m,
                    verdicts,
                    directory,
                    config=self._manifest_config(item, m.threads),
                    charts=charts,
                    title=item.nodeid,
                    program=item.stash.get(PROGRAM_KEY, None),
                )
            except OSError as err:  # a full disk, a read-only mount: one line, not a traceback
                # A report that CI archives without its files would pass for a complete one.
                report.outcome = "failed"
                report.longrepr = (
                    f"pytest-sme2: cannot write the report files of {item.nodeid} to "
                    f"{directory}: {err.strerror or err}"
                    + (f" ({err.filename})" if err.filename else "")
                )
            else:
                links = [(label, self._href(path)) for label, path in written.links()]
                report.sme2_artifacts = str(directory)
                self.local[item.nodeid] = (m, verdicts)
        report.sme2_cells = row_cells(m)
        report.sme2_summary = summary_row(m, verdicts)
        report.sme2_skipped = skipped_reasons([verdicts])
        report.sme2_untimed = untimed_class(m, verdicts)
        baseline_path, changes = item.stash.get(BASELINE_CHANGES_KEY, (None, ()))
        if changes:
            shown = os.path.relpath(baseline_path, self.config.invocation_params.dir)
            report.sme2_baseline_changes = (shown, tuple(changes))
        html_plugin = self.config.pluginmanager.getplugin("html")
        if html_plugin is not None:
            block = extra_html(m, verdicts, charts, links)
            record = item.stash.get(HISTORY_KEY, None)
            if record is not None:
                block += self._trend(record)
            extra = html_plugin.extras.html(block)
            report.extras = [*getattr(report, "extras", []), extra]
        return report

    def _explain_unmeasured(
        self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
    ) -> None:
        """An sme2 case that xfailed or failed before it was measured gets its one-line reason
        (``report.sme2_reason``) for the HTML row and report.md, and its case's cells.

        An export failure is an imperative xfail raised inside the ``sme2_artifact`` fixture:
        pytest keeps that fixture's source as the report's traceback, which pytest-html showed
        as the row's log instead of the reason. The reason *is* the whole story there (the
        export names its stage and error), so it replaces the traceback. A real error keeps its
        traceback, collapsed under the reason (:meth:`pytest_html_results_table_html`).
        """
        callspec = getattr(item, "callspec", None)
        case = callspec.params.get("sme2_case") if callspec is not None else None
        if case is None or MEASUREMENT_KEY in item.stash:
            return
        if hasattr(report, "wasxfail"):
            outcome, reason = "xfailed", report.wasxfail
            if call.excinfo is not None and call.excinfo.errisinstance(pytest.xfail.Exception):
                report.longrepr = reason  # pytest.xfail(reason): its traceback is ours
        elif report.failed:
            outcome = "error" if report.when != "call" else "failed"
            crash = getattr(report.longrepr, "reprcrash", None)
            reason = crash.message if crash is not None else report.longreprtext.strip()
            reason = reason.splitlines()[0] if reason else outcome
        else:
            return
        report.sme2_reason = (outcome, reason)
        report.sme2_cells = {
            "sme2-device": case.device.id,
            "sme2-model": case.model.name,
            "sme2-dtype": case.dtype,
        }

    def _history_dir(self) -> Path | None:
        directory = self.config.getoption("sme2_history", None) or self.config.getini(
            "sme2_history"
        )
        return Path(directory) if directory else None

    def _trend(self, record: HistoryRecord) -> str:
        """The case's last commits inline, linked to its section of the history page (written
        into the history directory when the session ends)."""
        from pytest_sme2.judge.history import PAGE_NAME, commit_ranks, read_history
        from pytest_sme2.report.history_page import trend_html
        from pytest_sme2.report.trends import build_series

        directory = self._history_dir()
        assert directory is not None, "a history record is only written under --sme2-history"
        if self.history is None:  # the first time: everything so far, this record included
            self.history = list(read_history(directory).records)
        else:
            self.history.append(record)
        same = [r for r in self.history if _series_key(r) == _series_key(record)]
        ranks, _ = commit_ranks(same, self.config.rootpath)
        (series,) = build_series(same, ranks)
        return trend_html(series, f"{self._href(directory / PAGE_NAME)}#{series.anchor}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from pytest_sme2 import progress

        progress.terminal_written()  # the terminal reporter writes this report's letter
        self.exports += [Finished.from_json(d) for d in getattr(report, "sme2_exports", ())]
        unmeasured = getattr(report, "sme2_reason", None)
        if unmeasured:
            self.unmeasured.append((report.nodeid, *unmeasured))
        if report.when != "call":
            return
        directory = getattr(report, "sme2_artifacts", None)
        if directory:
            self.dirs[report.nodeid] = Path(directory)
        row = getattr(report, "sme2_summary", None)
        if row:
            self.summary_rows.append(row)
            self.skipped.update(getattr(report, "sme2_skipped", ()))
            untimed = getattr(report, "sme2_untimed", None)
            if untimed:
                self.untimed[untimed] += 1
        changes = getattr(report, "sme2_baseline_changes", None)
        if changes:
            path, what = changes
            self.baseline_changes.append((path, tuple(what)))

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        from pytest_sme2.report.html import COLUMNS

        for offset, (title, column) in enumerate(COLUMNS):
            cells.insert(2 + offset, f'<th class="col-{column}">{title}</th>')

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        from pytest_sme2.report.html import COLUMNS

        values = getattr(report, "sme2_cells", {})
        for offset, (_, column) in enumerate(COLUMNS):
            value = html.escape(values.get(column, ""))
            cells.insert(2 + offset, f'<td class="col-{column}">{value}</td>')

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_html(self, report: pytest.TestReport, data: list[str]) -> None:
        """An unmeasured sme2 case's log opens on its one-line reason; a real error's traceback
        follows, collapsed (``data`` holds pytest-html's escaped log: traceback, then the
        captured sections)."""
        unmeasured = getattr(report, "sme2_reason", None)
        if unmeasured:
            from pytest_sme2.report.html import unmeasured_log

            outcome, reason = unmeasured
            data[:] = unmeasured_log(outcome, reason, report.longreprtext.strip(), data)

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str]
    ) -> None:
        from pytest_sme2.report.content import untimed_summary

        for line in untimed_summary(self.untimed, len(self.summary_rows)):
            prefix.append(f'<p class="sme2-untimed">pytest-sme2: {html.escape(line)}</p>')
        if len(self.dirs) > 1:
            from pytest_sme2.report.content import fleet_table

            fleet = fleet_table([entry.measurement for entry in self.entries])
            if fleet is not None:
                prefix.append(
                    '<h2 class="sme2-fleet">SME2 across devices</h2>'
                    "<p>Shares are of the headline variant (SME2-on where it ran).</p>"
                    + fleet.html("sme2-table sme2-fleet")
                )
        if self.dirs and self.scaling:
            from pytest_sme2.report.html import scaling_html

            prefix.append(scaling_html(self.scaling))

    @functools.cached_property
    def scaling(self) -> list[ScalingView]:
        """The session's thread-scaling views (``report.scaling_view``), built once from every
        case."""
        from pytest_sme2.report.scaling_view import scaling_views

        return scaling_views(entry.measurement for entry in self.entries)

    @functools.cached_property
    def entries(self) -> list[SessionEntry]:
        """Every measured test of the session, from this process or reloaded from what an xdist
        worker saved (the case record is lossless), by node id: workers finish in no fixed
        order, and the reports must not depend on it. Read once, when the session has ended:
        the HTML summary and report.md both use it."""
        from pytest_sme2.report.artifacts import MANIFEST_NAME, REPORT_NAME
        from pytest_sme2.report.from_files import load_test_dir
        from pytest_sme2.report.markdown import SessionEntry

        entries = []
        for nodeid, directory in sorted(self.dirs.items()):
            if nodeid in self.local:
                m, verdicts = self.local[nodeid]
            else:
                m, verdicts = load_test_dir(directory / MANIFEST_NAME)
            entries.append(SessionEntry(nodeid, m, tuple(verdicts), directory / REPORT_NAME))
        return entries

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write the session report.md above the device folders, and the history page into the
        history directory (not on xdist workers)."""
        if hasattr(self.config, "workerinput") or not self.dirs:
            return
        history = self._history_dir()
        if history is not None and history.is_dir():
            from pytest_sme2.judge.history import PAGE_NAME
            from pytest_sme2.report.history_page import write_history
            from pytest_sme2.report.trends import trends

            found = trends(history, self.config.rootpath)
            self.history_problems = found.problems
            write_history(found, history / PAGE_NAME, None)
            self.history_page = history / PAGE_NAME
        from pytest_sme2.report.artifacts import SESSION_REPORT_NAME
        from pytest_sme2.report.markdown import session_report

        entries = self.entries
        # Test dirs are <root>/<device>/<case> (the sme2_artifacts_dir fixture): report in root.
        root = next(iter(self.dirs.values())).parent.parent
        path = root / SESSION_REPORT_NAME
        try:
            write_atomic(path, session_report(entries, base=root, unmeasured=self.unmeasured))
        except OSError as err:  # the session's verdicts stand; the missing report fails it
            self.session_report_error = (
                f"pytest-sme2: cannot write the session report {path}: {err.strerror or err}"
            )
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        else:
            self.session_report = path

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_sme2.report.content import untimed_summary
        from pytest_sme2.report.terminal import scaling_lines, slowest_lines, summary_lines

        if self.exports:
            terminalreporter.section("pytest-sme2 slowest exports and builds")
            for line in slowest_lines(self.exports):
                terminalreporter.write_line(line)
        if self.summary_rows:
            terminalreporter.section("pytest-sme2")
            for line in summary_lines(self.summary_rows, sorted(self.skipped)):
                terminalreporter.write_line(line)
            for line in untimed_summary(self.untimed, len(self.summary_rows)):
                terminalreporter.write_line(line)
            if self.dirs and self.scaling:
                terminalreporter.section("pytest-sme2 thread scaling")
                for line in scaling_lines(self.scaling):
                    terminalreporter.write_line(line)
            if self.session_report is not None:
                terminalreporter.write_line(f"pytest-sme2 session report: {self.session_report}")
            if self.history_page is not None:
                terminalreporter.write_line(f"pytest-sme2 history page: {self.history_page}")
            for line in self.history_problems:
                terminalreporter.write_line(f"pytest-sme2 history: {line}", yellow=True)
            if self.session_report_error:
                terminalreporter.write_line(self.session_report_error, red=True)
        self._baselines_summary(terminalreporter)

    def _baselines_summary(self, terminalreporter: Any) -> None:
        """Every baseline written this session and what changed in it (a case's changes travel
        on its report, so this works under xdist), then the baselines no case of the suite uses
        (``Sme2Session.finish``), listed or, under ``--sme2-update-baselines``, removed."""
        from pytest_sme2.report.terminal import baseline_change_lines

        if self.baseline_changes:
            terminalreporter.section("pytest-sme2 baselines written")
            for line in baseline_change_lines(self.baseline_changes):
                terminalreporter.write_line(line)
        unused = self.config.stash.get(UNUSED_BASELINES_KEY, None)
        if unused is not None and unused.paths:
            terminalreporter.section("pytest-sme2 unused baselines")
            for line in unused.lines(self.config.invocation_params.dir):
                terminalreporter.write_line(line, yellow=not unused.removed)
