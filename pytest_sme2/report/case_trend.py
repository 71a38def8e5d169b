"""A judged case's last commits in its pytest-html extra (``--sme2-history``), linked to its
section of the history page the session writes when it ends.

The records are the history directory's, read once, on the first record this session (or xdist
worker) appends, and then kept up to date with the records it appends: a session of many cases
does not read the directory again per case.
"""

from __future__ import annotations

from pathlib import Path

from pytest_sme2.judge.history import HistoryRecord, commit_ranks, read_history
from pytest_sme2.report.history_page import trend_html
from pytest_sme2.report.trends import build_series, case_name, series_anchor


def _case(record: HistoryRecord) -> tuple[str, str]:
    """The series a record belongs to: its case and device, as the page groups them."""
    return (case_name(record.measurement), record.device)


class CaseTrends:
    """The records the extras draw from (see the module's docstring); session state."""

    def __init__(self, directory: Path, repo: Path) -> None:
        self.directory = directory
        #: the repository whose commits order the points (``history.commit_ranks``)
        self.repo = repo
        self._records: list[HistoryRecord] | None = None
        self._by_anchor: dict[str, tuple[str, str]] = {}

    def add(self, record: HistoryRecord) -> str:
        """Take the record this session just appended; its series' anchor in the page."""
        if self._records is None:  # the first time: everything so far, this record included
            self._records = list(read_history(self.directory).records)
        else:
            self._records.append(record)
        anchor = series_anchor(*_case(record))
        self._by_anchor[anchor] = _case(record)
        return anchor

    def extra_html(self, anchor: str, page_href: str) -> str:
        """The series ``anchor``'s last commits, linked to ``page_href#anchor``."""
        same = [r for r in self._records or () if _case(r) == self._by_anchor[anchor]]
        ranks, _ = commit_ranks(same, self.repo)
        (series,) = build_series(same, ranks)
        return trend_html(series, f"{page_href}#{series.anchor}")
