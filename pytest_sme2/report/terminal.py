"""The end-of-session terminal summary: the session report model
(:mod:`pytest_sme2.report.session_report`) as pytest's terminal writes it, section by section.

First the slowest exports and runner builds of the session, with seconds per stage. Then one row
per judged test — model, dtype, device, E2E median SME2-off / SME2-on (timing-only runs), speedup
with its 95 % interval (or instruction ratio, or why there is neither), the top category of the
headline variant (SME2-on where measured: the picture after SME2) with its share, and the verdict
with skipped gates counted — and below the table each distinct reason a gate was skipped, once,
and the machine classes that had no time record (a fleet's devices are rows of their own: the
cross-device table is report.md's and the HTML page's). With several thread counts, each model ×
dtype's thread-scaling table and knee sentences (:mod:`pytest_sme2.report.scaling_view`). Then
the cases that ended unmeasured and why; after ``--sme2-update-baselines`` or a missing
baseline, every baseline file written and what changed in it, so the update can be reviewed
before ``git diff baselines/``; and the baselines no case of the suite uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.progress import Finished
from pytest_sme2.report.format import Table
from pytest_sme2.report.scaling_view import ScalingView, knee_lines, scaling_table
from pytest_sme2.report.session_report import BaselineChanges, SessionReport

#: How many of the session's exports and runner builds the summary lists, slowest first.
SLOWEST = 5


@dataclass(frozen=True)
class Say:
    """One thing the summary writes: a section's heading, or a line (in ``colour``, if any)."""

    text: str
    heading: bool = False
    colour: str | None = None


def summary(report: SessionReport, *, written: Path | None = None, error: str = "") -> list[Say]:
    """The whole summary; ``written`` is the session report.md where it was written, ``error``
    why it could not be (a full disk)."""
    said: list[Say] = []
    if report.exports:
        said.append(Say("pytest-sme2 slowest exports and builds", heading=True))
        said += map(Say, slowest_lines(report.exports))
    if report.rows:
        said.append(Say("pytest-sme2", heading=True))
        said += map(Say, summary_lines(report))
        if report.losses:
            said.append(Say("pytest-sme2 SME2 losses", heading=True))
            said += [Say(line, colour="red") for line in report.losses]
        if report.scaling:
            said.append(Say("pytest-sme2 thread scaling", heading=True))
            said += map(Say, scaling_lines(report.scaling))
        if written is not None:
            said.append(Say(f"pytest-sme2 session report: {written}"))
        if report.history_page is not None:
            said.append(Say(f"pytest-sme2 history page: {report.history_page}"))
        said += [
            Say(f"pytest-sme2 history: {line}", colour="yellow") for line in report.history_problems
        ]
        if error:
            said.append(Say(error, colour="red"))
    if report.unmeasured:
        said.append(Say("pytest-sme2 not measured", heading=True))
        said += [Say(f"{nodeid}: {how}: {why}") for nodeid, how, why in report.unmeasured]
    if report.baseline_changes:
        said.append(Say("pytest-sme2 baselines written", heading=True))
        said += map(Say, baseline_change_lines(report.baseline_changes))
    if report.unused_lines:
        removed = report.unused is not None and report.unused.removed
        said.append(Say("pytest-sme2 unused baselines", heading=True))
        said += [Say(line, colour=None if removed else "yellow") for line in report.unused_lines]
    return said


def summary_lines(report: SessionReport) -> list[str]:
    """The table of the session's rows as text lines, each skipped gate's reason, and each machine
    class without a time record."""
    import pandas as pd  # deferred: only runs at session end

    if not report.rows:
        return []
    # a column only some rows have (tokens per second: language models only) reads "—" elsewhere
    rows = [dict(row.cells) for row in report.rows]
    lines = pd.DataFrame(rows).fillna("—").to_string(index=False).splitlines()
    return [
        *lines,
        *(f"skipped gate: {reason}" for reason in report.skipped),
        *report.untimed,
    ]


def table_lines(table: Table) -> list[str]:
    """A report table as aligned text lines."""
    import pandas as pd  # deferred: only runs at session end

    frame = pd.DataFrame(list(table.rows), columns=list(table.headers))
    return frame.to_string(index=False).splitlines()


def scaling_lines(views: Sequence[ScalingView]) -> list[str]:
    """Each thread-scaling view as its title, its table and its knee sentences."""
    lines: list[str] = []
    for view in views:
        lines += [f"{view.title}:", *table_lines(scaling_table(view))]
        lines += list(knee_lines(view))
    return lines


def baseline_change_lines(changes: Sequence[BaselineChanges]) -> list[str]:
    """``path`` then each change indented, for every baseline written this session."""
    lines = []
    for changed in changes:
        lines.append(f"{changed.path}:")
        lines += [f"    {change}" for change in changed.changes]
    return lines


def slowest_lines(finished: Sequence[Finished], limit: int = SLOWEST) -> list[str]:
    """The ``limit`` slowest exports and builds of the session, with seconds per stage, and
    their total: where a cold session's minutes went."""
    ranked = sorted(finished, key=lambda done: done.seconds, reverse=True)
    total = sum(done.seconds for done in finished)
    lines = [done.describe() for done in ranked[:limit]]
    return [*lines, f"{len(finished)} in all, {total:.1f} s (summed over processes)"]
