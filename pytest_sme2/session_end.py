"""What a session does when its tests are done: find the baselines no case uses (and remove them
as asked), write the history page into ``--sme2-history``, and write the session report.md.

Apart from :mod:`pytest_sme2.session` so that the session object stays the hooks and its state;
each step here is one function the session calls from ``pytest_sessionfinish``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_sme2.judge.unused_baselines import UnusedBaselines
    from pytest_sme2.report.session_report import SessionReport
    from pytest_sme2.settings import Case, Settings


def whole_suite(settings: Settings, config: pytest.Config, *, deselected: bool) -> bool:
    """Whether the session collected every case of the suite: only then is a baseline no case
    uses known to be unused. Not with ``--sme2-models``/``--sme2-dtypes``, ``-k``, ``-m`` or any
    other deselection (``deselected``)."""
    option = config.option
    subset = settings.models or settings.dtypes or deselected
    return not (subset or getattr(option, "keyword", "") or getattr(option, "markexpr", ""))


def find_unused(
    settings: Settings, cases: Iterable[Case], config: pytest.Config, exitstatus: int
) -> UnusedBaselines:
    """The baselines of the session's devices that none of ``cases`` (every case of the suite)
    uses; under ``--sme2-update-baselines`` (and not ``--collect-only``, nor an interrupted
    session, nor one that named its test files) removed. xdist's workers each look and remove:
    the first one does."""
    from pytest_sme2.judge.baseline import baseline_path
    from pytest_sme2.judge.unused_baselines import settle_unused

    used = {
        baseline_path(
            settings.baseline_dir, c.device.baseline_directory, c.model.name, c.dtype, c.threads
        )
        for c in cases
    }
    # a headline-only device (auto's emulated one) runs a subset of its dtypes, as under
    # --sme2-dtypes: its other baselines are not unused, and never removed
    folders = [
        settings.baseline_dir / device.baseline_directory
        for device in settings.devices
        if not device.headline_only
    ]
    update = settings.update_baselines and not config.option.collectonly
    update = update and exitstatus != pytest.ExitCode.INTERRUPTED
    # files named on the command line: a module that registers models may be left out
    named = config.args_source is pytest.Config.ArgsSource.ARGS
    return settle_unused(folders, used, settings.threads, update=update, named=named)


def write_history_page(directory: Path, repo: Path) -> tuple[Path | None, tuple[str, ...]]:
    """The history page of ``directory`` written into it (where it exists: the session judged
    something), and one line per thing of it that could not be read."""
    if not directory.is_dir():
        return None, ()
    from pytest_sme2.judge.history import PAGE_NAME
    from pytest_sme2.report.history_page import write_history
    from pytest_sme2.report.trends import trends

    found = trends(directory, repo)
    write_history(found, directory / PAGE_NAME, None)
    return directory / PAGE_NAME, found.problems


def write_session_report(report: SessionReport) -> tuple[Path | None, str]:
    """The session report.md, above the device folders of the tests that wrote their files
    (``<root>/<device>/<case>``, the ``sme2_artifacts_dir`` fixture); nowhere if none did.
    Where it was written, or why it could not be (a full disk): one line."""
    from pytest_sme2.cache import write_atomic
    from pytest_sme2.report.artifacts import SESSION_REPORT_NAME
    from pytest_sme2.report.markdown import session_markdown

    written = [row.outcome.run_dir for row in report.rows if row.outcome.case_report is not None]
    if not written or written[0] is None:
        return None, ""
    root = written[0].parent.parent
    path = root / SESSION_REPORT_NAME
    try:
        write_atomic(path, session_markdown(report, base=root))
    except OSError as err:
        return None, f"pytest-sme2: cannot write the session report {path}: {err.strerror or err}"
    return path, ""
