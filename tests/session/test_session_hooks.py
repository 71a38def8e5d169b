"""The session object on its own: :class:`Sme2Session` made from a real pytest configuration
(options and ini parsed by pytest, no tests run), given test reports and an xdist worker's
findings as pytest and xdist hand them over, and asked for what its hooks say."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from _pytest.terminal import TerminalReporter

from pytest_sme2 import progress
from pytest_sme2.judge.unused_baselines import UnusedBaselines
from pytest_sme2.progress import Finished
from pytest_sme2.records.outcome import CaseOutcome
from pytest_sme2.records.verdict import Status, Verdict
from pytest_sme2.report.content import summary_row
from pytest_sme2.session import Sme2Session
from tests.inner import INNER_DEFAULTS, INNER_PLAN
from tests.measurements import HOST, counted_measurement, measurement

pytest_plugins = ["pytester"]

#: the exports and tasks each test finishes are its own (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("own_progress")


def session_of(pytester: pytest.Pytester, *args: str) -> Sme2Session:
    """The session object of a pytest invoked with ``args`` in ``pytester``'s directory."""
    return Sme2Session(pytester.parseconfig(*args))


def test_settings_are_the_command_lines_over_the_inis(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the ini's runs, not the inner sessions' short plan (PYTEST_ADDOPTS beats an ini value)
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(f for f in INNER_DEFAULTS if f not in INNER_PLAN))
    pytester.makeini(
        "[pytest]\nsme2_runs = 7\nsme2_threads = 1, 2\nsme2_strict = true\n"
        "sme2_init_time_tolerance = 20\n"
    )
    settings = session_of(pytester).settings
    assert (settings.plan.runs, settings.threads, settings.strict) == (7, (1, 2), True)
    assert settings.tolerances.init_time_percent == 20
    assert settings.tolerances.peak_rss_percent == 10  # the default
    assert settings.baseline_dir == pytester.path / "baselines"
    assert session_of(pytester, "--sme2-runs=3").settings.plan.runs == 3


def test_a_bad_value_fails_in_one_line_naming_the_option(pytester: pytest.Pytester) -> None:
    with pytest.raises(pytest.fail.Exception) as failed:
        _ = session_of(pytester, "--sme2-device=nope").settings
    assert not failed.value.pytrace
    assert str(failed.value).startswith(
        "--sme2-device='nope' is not a device; choose one of: android, host, mac, qemu-sme2"
    )


def test_a_tests_outcome_is_taken_before_any_reporter_announces_the_test(
    pytester: pytest.Pytester,
) -> None:
    """A user who stops the session on seeing PASSED (CI's SIGTERM, Ctrl-C) gets that case in
    report.md: the session takes the outcome before the terminal and pytest-html see the report."""
    config = pytester.parseconfigure()
    hook = config.pluginmanager.hook.pytest_runtest_logreport
    called = [impl.plugin_name for impl in reversed(hook.get_hookimpls())]
    assert called.index("sme2-session") < called.index("terminalreporter"), called


def _report(outcome: CaseOutcome, when: str = "call", result: str = "passed") -> pytest.TestReport:
    """The test report pytest makes, carrying the outcome as the session's makereport left it."""
    report = pytest.TestReport(outcome.nodeid, ("t.py", 1, "t"), {}, result, None, when)
    report.sme2_outcome = json.loads(json.dumps(outcome.to_json()))  # as xdist sends it
    return report


def _outcomes(tmp_path: Path) -> list[CaseOutcome]:
    skipped = Verdict("speedup", Status.SKIP, "host CPU has no SME2")
    return [
        CaseOutcome(
            "t.py::test[toy-fp32]",
            "host",
            "toy",
            "fp32",
            1,
            measurement(HOST),
            (skipped,),
            run_dir=tmp_path / "host" / "toy-fp32",
            case_report=tmp_path / "host" / "toy-fp32" / "sme2_report.md",
            baseline=tmp_path / "baselines" / "host" / "toy-fp32.json",
            baseline_changes=("new baseline",),
        ),
        CaseOutcome(
            "t.py::test[qemu-sme2-toy-fp32]",
            "qemu-sme2",
            "toy",
            "fp32",
            1,
            counted_measurement(),
            run_dir=tmp_path / "qemu-sme2" / "toy-fp32",
            case_report=tmp_path / "qemu-sme2" / "toy-fp32" / "sme2_report.md",
        ),
        CaseOutcome(
            "t.py::test[toy-int8]", "host", "toy", "int8", 1, unmeasured=("xfailed", "no int8")
        ),
    ]


def _ended(session: Sme2Session) -> pytest.Session:
    """The pytest session whose end the session object's ``pytest_sessionfinish`` is told of."""
    ended = pytest.Session.from_config(session.config)
    ended.exitstatus = pytest.ExitCode.OK
    return ended


def test_each_tests_outcome_arrives_whole_on_its_report(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """What a worker's report carries is the outcome itself: the controller's is equal to it."""
    session = session_of(pytester)
    outcomes = _outcomes(tmp_path)
    for outcome in outcomes:
        session.pytest_runtest_logreport(_report(outcome))
    session.pytest_runtest_logreport(
        pytest.TestReport("t.py::plain", ("t.py", 2, "p"), {}, "passed", None, "call")
    )
    assert session.outcomes == {outcome.nodeid: outcome for outcome in outcomes}


def test_the_html_hooks_show_the_summary_row_and_the_session(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    session = session_of(pytester)
    host, qemu, int8 = _outcomes(tmp_path)
    for outcome in (host, qemu, int8):
        session.pytest_runtest_logreport(_report(outcome))
    header = ["<th>Result</th>", "<th>Test</th>", "<th>Duration</th>"]
    session.pytest_html_results_table_header(header)
    assert header[2] == '<th class="col-sme2-device">Device</th>'
    assert header[-1] == "<th>Duration</th>" and len(header) == 3 + 6
    cells = ["<td>passed</td>", "<td>t</td>", "<td>1 s</td>"]
    session.pytest_html_results_table_row(_report(qemu), cells)
    assert qemu.measurement is not None
    speedup = summary_row(qemu.measurement, ())["speedup"]
    assert f'<td class="col-sme2-speedup">{speedup}</td>' in cells
    ended = _report(int8, when="setup", result="skipped")
    ended.wasxfail = "no int8"
    log = ["escaped traceback", "captured"]
    session.pytest_html_results_table_html(ended, log)
    assert log[0].startswith('<div class="sme2-reason">xfailed: no int8</div>')
    prefix: list[str] = []
    session.pytest_html_results_summary(prefix)
    page = "".join(prefix)
    assert "SME2 across devices" in page and "no int8" in page and "host CPU has no SME2" in page


def test_the_session_report_is_written_and_said_once_the_session_ends(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    session = session_of(pytester, f"--sme2-artifacts={tmp_path}")
    for outcome in _outcomes(tmp_path):
        session.pytest_runtest_logreport(_report(outcome))
    ended = _ended(session)
    session.pytest_sessionfinish(ended, pytest.ExitCode.OK)
    assert session.written == tmp_path / "report.md"
    text = session.written.read_text()
    assert text.startswith("# SME2 session report\n\n2 test(s), 0 with failed gates.")
    assert "[host/toy-fp32/sme2_report.md](host/toy-fp32/sme2_report.md)" in text
    out = io.StringIO()
    session.pytest_terminal_summary(TerminalReporter(session.config, out))
    said = out.getvalue()
    for line in (
        "pytest-sme2 ===",
        f"pytest-sme2 session report: {tmp_path / 'report.md'}",
        "pytest-sme2 not measured",
        "t.py::test[toy-int8]: xfailed: no int8",
        "pytest-sme2 baselines written",
    ):
        assert line in said, said


def test_a_session_report_that_cannot_be_written_fails_the_session_in_one_line(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    blocked = tmp_path / "report.md"
    blocked.mkdir()  # where the file should go: writing it fails as a full disk would
    session = session_of(pytester)
    for outcome in _outcomes(tmp_path):
        session.pytest_runtest_logreport(_report(outcome))
    ended = _ended(session)
    session.pytest_sessionfinish(ended, pytest.ExitCode.OK)
    assert ended.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert session.write_error.startswith(
        f"pytest-sme2: cannot write the session report {blocked}:"
    )


def test_an_xdist_workers_findings_reach_the_controller(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """A worker sends the unused baselines it found and the exports it finished when its
    session ends (``workeroutput``); the controller merges every worker's."""
    worker = session_of(pytester)
    worker.config.workerinput = {"workerid": "gw0"}  # what xdist sets on a worker's config
    worker.config.workeroutput = {}
    with progress.task("export toy[fp32]"):
        pass
    worker.unused = UnusedBaselines((tmp_path / "gone.json",), removed=False)
    worker.pytest_sessionfinish(_ended(worker), pytest.ExitCode.OK)
    found = json.loads(json.dumps(worker.config.workeroutput))  # as execnet sends it

    controller = session_of(pytester)
    controller.pytest_testnodedown(SimpleNamespace(workeroutput=found))
    controller.pytest_testnodedown(
        SimpleNamespace(
            workeroutput={
                "sme2": {"unused": UnusedBaselines((), removed=True).to_json(), "exports": []}
            }
        )
    )
    assert controller.unused == UnusedBaselines((tmp_path / "gone.json",), removed=True)
    assert [done.what for done in controller.exports] == ["export toy[fp32]"]
    assert isinstance(controller.exports[0], Finished)
