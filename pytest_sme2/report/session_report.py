"""The session report as data: :class:`SessionReport`, built once from the session's outcomes
(:class:`~pytest_sme2.records.outcome.CaseOutcome`) and what the session found at its end; the
session report.md (:mod:`~pytest_sme2.report.markdown`), the pytest-html summary
(:mod:`~pytest_sme2.report.html`) and the terminal summary (:mod:`~pytest_sme2.report.terminal`)
only render it, as :mod:`~pytest_sme2.report.sections` is rendered per case.

Each used to gather the session's facts for itself, and they drifted: the untimed cases were
missing from report.md, the skipped gates from the HTML, and the HTML's speedup cell computed its
own figure (time only, so "—" on qemu-sme2 beside an instruction ratio in the table above it).
Here each fact is found once; a test renders one model three ways and finds each fact in each.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.judge.unused_baselines import UnusedBaselines
from pytest_sme2.progress import Finished
from pytest_sme2.records.outcome import CaseOutcome
from pytest_sme2.report import content as c
from pytest_sme2.report.format import Table
from pytest_sme2.report.scaling_view import ScalingView, scaling_views


@dataclass(frozen=True)
class Row:
    """One measured test: its outcome and its summary row (the same cells in every table)."""

    outcome: CaseOutcome
    cells: Mapping[str, str]


@dataclass(frozen=True)
class BaselineChanges:
    """A baseline file written this session (relative to where pytest was invoked), and what
    changed in it, one line per change."""

    path: str
    changes: tuple[str, ...]


@dataclass(frozen=True)
class SessionReport:
    """Everything the session's summary says, found once (see the module's docstring)."""

    #: one per measured test
    rows: tuple[Row, ...]
    #: the cases that ended unmeasured: (node id, outcome, one-line reason), by node id
    unmeasured: tuple[tuple[str, str, str], ...] = ()
    #: the cross-device table, where the session measured on more than one device
    fleet: Table | None = None
    scaling: tuple[ScalingView, ...] = ()
    #: one sentence per machine class that had no time record (``content.untimed_summary``)
    untimed: tuple[str, ...] = ()
    #: each SME2 loss a case failed on (an operator dearer with SME2 on), naming its case
    losses: tuple[str, ...] = ()
    #: each distinct reason a gate was skipped, once
    skipped: tuple[str, ...] = ()
    baseline_changes: tuple[BaselineChanges, ...] = ()
    #: the baselines no case of the suite uses, where the session could tell
    unused: UnusedBaselines | None = None
    #: the unused baselines as said: a heading line, then each path (``UnusedBaselines.lines``)
    unused_lines: tuple[str, ...] = ()
    #: the long work (exports, runner builds) the session's processes finished
    exports: tuple[Finished, ...] = ()
    #: the history page written into ``--sme2-history``, and what of that directory was unread
    history_page: Path | None = None
    history_problems: tuple[str, ...] = ()

    @property
    def failed(self) -> int:
        """How many measured tests failed a gate."""
        return sum(row.outcome.failed_gates for row in self.rows)


def summary_cells(outcome: CaseOutcome) -> dict[str, str]:
    """The outcome's summary row (``content.summary_row``); for a case never measured, the case
    itself (device, model, dtype), which is all there is to show of it."""
    m = outcome.measurement
    if m is None:
        return {"device": outcome.device, "model": outcome.model, "dtype": outcome.dtype}
    return c.summary_row(m, outcome.verdicts)


def build_session_report(
    outcomes: Iterable[CaseOutcome],
    *,
    here: Path,
    unused: UnusedBaselines | None = None,
    exports: Iterable[Finished] = (),
    history_page: Path | None = None,
    history_problems: Iterable[str] = (),
) -> SessionReport:
    """The session report of ``outcomes``, its rows in their order; ``here`` is where pytest was
    invoked, which the paths it names are relative to."""
    ordered = list(outcomes)
    rows = tuple(Row(o, summary_cells(o)) for o in ordered if o.measurement is not None)
    measurements = [row.outcome.measurement for row in rows if row.outcome.measurement]
    untimed = Counter(
        name
        for row in rows
        if row.outcome.measurement is not None
        and (name := c.untimed_class(row.outcome.measurement, row.outcome.verdicts)) is not None
    )
    return SessionReport(
        rows=rows,
        unmeasured=tuple(sorted((o.nodeid, *o.unmeasured) for o in ordered if o.unmeasured)),
        fleet=c.fleet_table(measurements),
        scaling=tuple(scaling_views(measurements)),
        untimed=tuple(c.untimed_summary(untimed, len(rows))),
        losses=tuple(
            c.loss_lines((m, r.outcome.verdicts) for r in rows if (m := r.outcome.measurement))
        ),
        skipped=tuple(c.skipped_reasons([row.outcome.verdicts for row in rows])),
        baseline_changes=_baseline_changes(ordered, here),
        unused=unused,
        unused_lines=tuple(unused.lines(here)) if unused is not None and unused.paths else (),
        exports=tuple(exports),
        history_page=history_page,
        history_problems=tuple(history_problems),
    )


def _baseline_changes(outcomes: Iterable[CaseOutcome], here: Path) -> tuple[BaselineChanges, ...]:
    """Every baseline file written with changes, by path."""
    written = [
        BaselineChanges(os.path.relpath(o.baseline, here), o.baseline_changes)
        for o in outcomes
        if o.baseline is not None and o.baseline_changes
    ]
    return tuple(sorted(written, key=lambda changed: changed.path))
