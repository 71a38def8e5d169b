"""One measured test's report files and pytest-html extra, made when its report is: the run
directory of the reference kit with our reports beside it (:mod:`pytest_sme2.report.artifacts`),
and the block shown under the test's row (charts, the brief sections, the last commits).

The session calls :func:`write_case_files` on the process that measured the test (an xdist
worker writes its own tests' files); a failure to write fails the test in one line: a report
that CI archives without its files would pass for a complete one.
"""

from __future__ import annotations

import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sme2.records.outcome import CaseOutcome

if TYPE_CHECKING:
    from pytest_sme2.report.case_trend import CaseTrends
    from pytest_sme2.settings import Settings


def manifest_config(settings: Settings, outcome: CaseOutcome) -> dict[str, Any]:
    """The settings that shaped the test's measurement, for its manifest.json."""
    return {
        "nodeid": outcome.nodeid,
        "device": outcome.device,
        **asdict(settings.plan),
        "threads": outcome.threads,
        "tolerances": asdict(settings.tolerances),
        "baseline_dir": str(settings.baseline_dir),
        "update_baselines": settings.update_baselines,
        "strict": settings.strict,
    }


#: the key of a remote xdist worker's paths in its ``workerinput`` (``lab.hooks``): pairs of
#: its own directory and the controller's that its files are copied to
REMOTE_KEY = "sme2_remote"


def href(config: pytest.Config, path: Path) -> str:
    """A link from the HTML report to ``path``: relative to the report file when there is one
    (the pair stays valid when copied together), else an absolute file URI. On a remote xdist
    worker, the link the controller's report needs: there the file is copied under the same
    name (``lab.shipping``), and there the HTML report is written."""
    html_path = getattr(config.option, "htmlpath", None)
    path = path.resolve()
    remote = getattr(config, "workerinput", {}).get(REMOTE_KEY)
    if remote is not None:
        html_path = remote["html"]
        for own, controller in remote["paths"]:
            if path.is_relative_to(own):
                path = Path(controller) / path.relative_to(own)
                break
    if html_path:
        return os.path.relpath(path, Path(html_path).resolve().parent)
    return path.as_uri()


def write_case_files(
    outcome: CaseOutcome,
    report: pytest.TestReport,
    *,
    config: pytest.Config,
    settings: Settings,
    trends: CaseTrends | None,
) -> CaseOutcome:
    """Write the measured ``outcome``'s files into its run directory and give ``report`` its
    pytest-html extra; the outcome with its case report, where it was written."""
    from pytest_sme2.report.artifacts import write_artifacts
    from pytest_sme2.report.charts import render_charts
    from pytest_sme2.report.kit_json import Program

    m = outcome.measurement
    assert m is not None and outcome.run_dir is not None, "a measured test has its run directory"
    charts = render_charts(m)
    links: list[tuple[str, str]] = []
    try:
        written = write_artifacts(
            m,
            outcome.verdicts,
            outcome.run_dir,
            config=manifest_config(settings, outcome),
            charts=charts,
            title=outcome.nodeid,
            program=None if outcome.pte is None else Program(outcome.pte, outcome.etrecord),
        )
    except OSError as err:  # a full disk, a read-only mount: one line, not a traceback
        report.outcome = "failed"
        report.longrepr = (
            f"pytest-sme2: cannot write the report files of {outcome.nodeid} to "
            f"{outcome.run_dir}: {err.strerror or err}"
            + (f" ({err.filename})" if err.filename else "")
        )
    else:
        links = [(label, href(config, path)) for label, path in written.links()]
        outcome = replace(outcome, case_report=written.report_md)
    html_plugin = config.pluginmanager.getplugin("html")
    if html_plugin is not None:
        from pytest_sme2.judge.history import PAGE_NAME
        from pytest_sme2.report.html import extra_html

        block = extra_html(m, outcome.verdicts, charts, links)
        if outcome.history_anchor is not None and trends is not None:
            page = href(config, trends.directory / PAGE_NAME)
            block += trends.extra_html(outcome.history_anchor, page)
        report.extras = [*getattr(report, "extras", []), html_plugin.extras.html(block)]
    return outcome


def unmeasured(call: pytest.CallInfo[None], report: pytest.TestReport) -> tuple[str, str] | None:
    """How a case's test that was never measured ended, and why in one line, where this report
    ends it: ("xfailed", reason) or ("failed" / "error", the exception's line); None otherwise.

    An export failure is an imperative xfail raised inside the ``sme2_artifact`` fixture: pytest
    keeps that fixture's source as the report's traceback, which pytest-html showed as the row's
    log instead of the reason. The reason *is* the whole story there (the export names its stage
    and error), so it replaces the traceback here. A real error keeps its traceback, collapsed
    under the reason (``report.html.unmeasured_log``).
    """
    if hasattr(report, "wasxfail"):
        if call.excinfo is not None and call.excinfo.errisinstance(pytest.xfail.Exception):
            report.longrepr = report.wasxfail  # pytest.xfail(reason): its traceback is ours
        return ("xfailed", report.wasxfail)
    if not report.failed:
        return None
    outcome = "error" if report.when != "call" else "failed"
    crash = getattr(report.longrepr, "reprcrash", None)
    reason = crash.message if crash is not None else report.longreprtext.strip()
    return (outcome, reason.splitlines()[0] if reason else outcome)
