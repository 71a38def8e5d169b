"""The history page and its markdown summary: per case × device, charts over commits and the steps.

One self-contained HTML file (charts are PNG ``data:`` URIs, as in the test reports) that a CI job
can upload as it is, and a markdown summary short enough for a pull-request comment: the steps,
one line each, and the last commit of every case.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from pytest_sme2.analysis.categories import CATEGORIES
from pytest_sme2.report.charts import CATEGORY_COLOURS, DPI, _png, data_uri
from pytest_sme2.report.trends import Point, Quantity, Series, Step, Trends, quantities

#: How many of a case's most recent commits the pytest-html report shows inline.
INLINE_POINTS = 5

_STYLE = (
    "<style>body{font-family:sans-serif;font-size:14px;margin:16px}"
    "table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;padding:2px 6px;"
    "text-align:left}.step{color:#a40000}.reverted{color:#666}.problem{background:#fff6d5}"
    "img{max-width:100%;border:1px solid #ddd}</style>"
)


def _quantity(key: str) -> Quantity:
    return next(q for q in quantities() if q.key == key)


def _per_variant(key: str) -> list[tuple[str, Quantity]]:
    """A panel's lines: the quantity ``key`` of SME2-off and of SME2-on."""
    return [(variant, _quantity(f"{key} {variant}")) for variant in ("sme2-off", "sme2-on")]


def _panels(series: Series) -> list[tuple[str, list[tuple[str, Quantity]]]]:
    """(title, [(legend, quantity)]) of each panel that has values to draw."""
    candidates = [
        ("E2E median, ms", _per_variant("e2e")),
        ("instructions per inference", _per_variant("instructions")),
        (
            "instruction ratio off ÷ on" if series.counts_instructions else "speedup off ÷ on",
            [("", _quantity("speedup"))],
        ),
        (
            "category share of the headline variant, %",
            [(c, _quantity(f"share {c}")) for c in CATEGORIES],
        ),
        ("method init, ms (fastest of the runs)", _per_variant("init-ms")),
        ("method init, instructions", _per_variant("init-instructions")),
        ("planned memory, MiB", _per_variant("planned")),
        ("peak resident memory, MiB", _per_variant("peak-rss")),
    ]
    return [
        (title, lines)
        for title, lines in candidates
        if any(v is not None for _, q in lines for v in series.values(q))
    ]


def series_chart(series: Series, steps: Sequence[Step]) -> bytes:
    """One figure per case × device: a panel per quantity over commits, steps marked."""
    panels = _panels(series)
    fig = Figure(figsize=(7.5, 2.3 * len(panels) + 0.6), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    x = np.arange(len(series.points))
    for ax, (title, lines) in zip(axes, panels, strict=True):
        for legend, quantity in lines:
            values = np.array([np.nan if v is None else v for v in series.values(quantity)])
            colour = CATEGORY_COLOURS.get(legend)
            ax.plot(x, values, marker="o", label=legend or None, color=colour)
        for step in steps:
            if any(step.quantity.key == q.key for _, q in lines):
                ax.axvline(step.index - 0.5, color="#a40000", linestyle="--", linewidth=1)
                if step.reverted_index is not None:
                    ax.axvline(step.reverted_index - 0.5, color="#888", linestyle=":", linewidth=1)
        _at_least_the_floor(ax, [q for _, q in lines], series)
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        if any(legend for legend, _ in lines):
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    axes[-1].set_xticks(x, [p.label for p in series.points], rotation=45, ha="right", fontsize=8)
    fig.suptitle(f"{series.case} on {series.device}", fontsize=10)
    return _png(fig)


def _at_least_the_floor(ax: Axes, drawn: Sequence[Quantity], series: Series) -> None:
    """A panel spans at least the tolerance around its level, so that a wiggle the gate lets
    pass (a 0.3 % change of the instruction ratio) does not fill the panel like a step."""
    if len(drawn) != 1 or not drawn[0].relative:
        return
    values = [v for v in series.values(drawn[0]) if v is not None]
    level, floor = float(np.median(values)), drawn[0].floor
    low, high = ax.get_ylim()
    ax.set_ylim(min(low, level * (1 - floor)), max(high, level * (1 + floor)))


def _cell(value: float | None, quantity: Quantity) -> str:
    if value is None:
        return "—"
    if quantity.key.startswith(("instructions", "init-instructions")):
        return f"{value:,.0f}"
    if quantity.key.startswith(("share", "planned", "peak-rss")):
        return f"{value:,.1f}"
    return f"{value:.3f}" if quantity.key.startswith(("e2e", "init-ms")) else f"{value:.2f}×"


def _table_quantities(series: Series) -> list[Quantity]:
    return [
        series.named(q)
        for q in quantities()
        if not q.key.startswith("share") and any(v is not None for v in series.values(q))
    ]


def point_label(point: Point) -> str:
    """The point's commit, or its time and why its records carry no commit."""
    why = point.last.git.no_commit if point.commit is None else None
    return f"{point.label} (no commit: {why})" if why else point.label


def points_table(series: Series, last: int | None = None) -> str:
    """An HTML table of the series' points (the ``last`` ones when given), newest last."""
    shown = _table_quantities(series)
    rows = [
        "<tr><th>commit</th><th>branch</th>"
        + "".join(f"<th>{html.escape(q.label)}</th>" for q in shown)
        + "</tr>"
    ]
    values = {q.key: series.values(q) for q in shown}
    start = 0 if last is None else max(0, len(series.points) - last)
    for i in range(start, len(series.points)):
        point = series.points[i]
        cells = "".join(f"<td>{_cell(values[q.key][i], q)}</td>" for q in shown)
        branch = point.last.git.branch or "—"
        rows.append(
            f"<tr><td>{html.escape(point_label(point))}</td><td>{html.escape(branch)}</td>"
            f"{cells}</tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def trend_html(series: Series, href: str) -> str:
    """A case's last commits for its pytest-html extra, linked to its section of the page."""
    return (
        '<div class="sme2-report"><h4>Over the last commits '
        f'(<a href="{html.escape(href)}">trend page</a>)</h4>'
        f"{points_table(series, INLINE_POINTS)}</div>"
    )


def _step_item(step: Step) -> str:
    css = "reverted" if step.reverted_at else "step"
    return f'<li class="{css}">{html.escape(step.sentence())}</li>'


def history_html(trends: Trends) -> str:
    """The whole page: what could not be read, the steps, then a section per case × device."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>pytest-sme2 history</title>",
        _STYLE,
        "</head><body><h1>pytest-sme2 history</h1>",
        f"<p>{trends.records} record(s), {len(trends.series)} case(s) × device(s).</p>",
    ]
    if trends.problems:
        parts.append(
            "<h2>Not used</h2><ul>"
            + "".join(f'<li class="problem">{html.escape(p)}</li>' for p in trends.problems)
            + "</ul>"
        )
    parts.append("<h2>Steps</h2>")
    parts.append(
        "<ul>" + "".join(_step_item(s) for s in trends.steps) + "</ul>"
        if trends.steps
        else "<p>No quantity moved beyond its noise.</p>"
    )
    for series in trends.series:
        steps = [s for s in trends.steps if (s.case, s.device) == (series.case, series.device)]
        png = series_chart(series, steps)
        parts.append(
            f'<section id="{series.anchor}"><h2>{html.escape(series.case)} on '
            f"{html.escape(series.device)}</h2>"
            f'<img alt="trend of {html.escape(series.case)} on {html.escape(series.device)}" '
            f'src="{data_uri(png)}">{points_table(series)}</section>'
        )
    parts.append("</body></html>")
    return "".join(parts)


def history_markdown(trends: Trends) -> str:
    """A pull-request comment: the steps, then each case's newest commit."""
    lines = ["## pytest-sme2 history", ""]
    lines.append(f"{trends.records} record(s), {len(trends.series)} case(s) × device(s).")
    lines.append("")
    lines.append("### Steps")
    lines.append("")
    lines += [f"- {s.sentence()}" for s in trends.steps] or ["No quantity moved beyond its noise."]
    lines.append("")
    lines.append(
        "| case | device | commits | newest | instructions (sme2-on) | E2E on ms "
        "| speedup (instruction ratio if emulated) |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for series in trends.series:
        cells = [
            _cell(series.values(_quantity(key))[-1], _quantity(key))
            for key in ("instructions sme2-on", "e2e sme2-on", "speedup")
        ]
        lines.append(
            f"| {series.case} | {series.device} | {len(series.points)} | "
            f"{point_label(series.points[-1])} | " + " | ".join(cells) + " |"
        )
    if trends.problems:
        lines += ["", "### Not used", ""] + [f"- {p}" for p in trends.problems]
    return "\n".join(lines) + "\n"


def write_history(trends: Trends, html_path: Path | None, markdown_path: Path | None) -> None:
    from pytest_sme2.cache import write_atomic

    if html_path is not None:
        write_atomic(html_path, history_html(trends))
    if markdown_path is not None:
        write_atomic(markdown_path, history_markdown(trends))
