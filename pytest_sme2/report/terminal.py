"""The end-of-session terminal table: one row per judged test.

Columns: model, dtype, device, E2E median SME2-off / SME2-on (timing-only runs), speedup with its
95 % interval (or why there is none), the top category of the headline variant (SME2-on where
measured: the picture after SME2) with its share, and the verdict with skipped gates counted.
Below the table, each distinct reason a gate was skipped, once. Rows are built per test
(``content.summary_row``) and carried on the test reports, so this works under pytest-xdist.
The slowest exports and runner builds of the session, with seconds per stage, come first.
Then, after ``--sme2-update-baselines`` or a missing baseline, every baseline file written and
what changed in it, so the update can be reviewed before ``git diff baselines/``. With several
thread counts, each model × dtype's thread-scaling table and knee sentences
(:mod:`pytest_sme2.report.scaling_view`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_sme2.progress import Finished
from pytest_sme2.report.scaling_view import ScalingView, knee_lines, scaling_table

#: How many of the session's exports and runner builds the summary lists, slowest first.
SLOWEST = 5


def summary_lines(rows: Sequence[dict[str, str]], skipped: Sequence[str]) -> list[str]:
    """The table as text lines."""
    import pandas as pd  # deferred: only runs at session end

    if not rows:
        return []
    # a column only some rows have (tokens per second: language models only) reads "—" elsewhere
    lines = pd.DataFrame(list(rows)).fillna("—").to_string(index=False).splitlines()
    return lines + [f"skipped gate: {reason}" for reason in skipped]


def scaling_lines(views: Sequence[ScalingView]) -> list[str]:
    """Each thread-scaling view as its title, its table and its knee sentences."""
    import pandas as pd  # deferred: only runs at session end

    lines: list[str] = []
    for view in views:
        table = scaling_table(view)
        frame = pd.DataFrame(list(table.rows), columns=list(table.headers))
        lines += [f"{view.title}:", *frame.to_string(index=False).splitlines()]
        lines += list(knee_lines(view))
    return lines


def baseline_change_lines(changes: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """``path`` then each change indented, for every baseline written this session."""
    lines = []
    for path, what in sorted(changes):
        lines.append(f"{path}:")
        lines += [f"    {change}" for change in what]
    return lines


def slowest_lines(finished: Sequence[Finished], limit: int = SLOWEST) -> list[str]:
    """The ``limit`` slowest exports and builds of the session, with seconds per stage, and
    their total: where a cold session's minutes went."""
    ranked = sorted(finished, key=lambda done: done.seconds, reverse=True)
    total = sum(done.seconds for done in finished)
    lines = [done.describe() for done in ranked[:limit]]
    return [*lines, f"{len(finished)} in all, {total:.1f} s (summed over processes)"]
