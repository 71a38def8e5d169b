"""pytest-html content: the per-test extra (charts, tables, evidence, verdicts, links), the extra
result-table cells (device, model, dtype, E2E on/off, speedup: the session's summary row) and the
session report above the results.

The extra is one HTML block rather than pytest-html image extras: pytest-html shows image extras
one at a time in a media viewer, while a reviewer wants both charts next to the tables. Charts are
``data:`` URIs, so ``--self-contained-html`` keeps them.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Verdict
from pytest_sme2.report import content as c
from pytest_sme2.report import format as fmt
from pytest_sme2.report import sections as s
from pytest_sme2.report.charts import data_uri, scaling_chart
from pytest_sme2.report.format import Table
from pytest_sme2.report.scaling_view import ScalingView
from pytest_sme2.report.session_report import SessionReport

#: Extra result-table columns: (header, CSS column name, the summary row's key), in order.
COLUMNS = (
    ("Device", "sme2-device", "device"),
    ("Model", "sme2-model", "model"),
    ("Dtype", "sme2-dtype", "dtype"),
    ("E2E off (ms)", "sme2-e2e-off", "E2E off ms"),
    ("E2E on (ms)", "sme2-e2e-on", "E2E on ms"),
    ("Speedup", "sme2-speedup", "speedup"),
)

_STYLE = (
    "<style>.sme2-report{font-family:sans-serif;font-size:13px;margin:6px 0}"
    ".sme2-report h3{margin:6px 0}.sme2-report h4{margin:10px 0 4px}"
    ".sme2-charts{display:flex;flex-wrap:wrap;gap:12px}"
    ".sme2-chart{max-width:100%;border:1px solid #ddd}"
    ".sme2-table{border-collapse:collapse;margin:4px 0}"
    ".sme2-table td,.sme2-table th{border:1px solid #ccc;padding:2px 6px;text-align:left;"
    "white-space:pre-wrap}.sme2-note{background:#fff6d5;padding:4px 8px}</style>"
)


def header_cells() -> list[str]:
    """The extra columns' headers, in :data:`COLUMNS` order."""
    return [f'<th class="col-{column}">{title}</th>' for title, column, _ in COLUMNS]


def row_cells(cells: Mapping[str, str]) -> list[str]:
    """A test's extra result-table cells, in :data:`COLUMNS` order, from its summary row
    (``session_report.summary_cells``: the cells every table of the session shows)."""
    return [
        f'<td class="col-{column}">{html.escape(cells.get(key, ""))}</td>'
        for _, column, key in COLUMNS
    ]


def _list(lines: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>"


def _part(part: s.Part) -> str:
    match part:
        case Table():
            return part.html()
        case s.Paragraph(text=text):
            return f"<p>{html.escape(text)}</p>"
        case s.Bullets(items=items):
            return _list(items)
        case s.Links(links=links):
            items = "".join(
                f'<li><a href="{html.escape(href)}">{html.escape(label)}</a></li>'
                for label, href in links
            )
            return f"<ul>{items}</ul>"
    raise TypeError(f"not a report part: {part!r}")


def section_html(section: s.Section) -> str:
    """A section under its ``<h4>`` heading."""
    return f"<h4>{html.escape(section.title)}</h4>" + "".join(map(_part, section.parts))


def extra_html(
    m: Measurement,
    verdicts: Sequence[Verdict],
    charts: Mapping[str, bytes],
    links: Sequence[tuple[str, str]] = (),
) -> str:
    """The HTML block shown under a test's row: the heading, the charts, then the brief view of
    the case's sections; ``links`` are (label, href) pairs."""
    parts = [
        _STYLE,
        '<div class="sme2-report">',
        f"<h3>{html.escape(fmt.case_title(m))}: {html.escape(c.verdict_word(verdicts))}</h3>",
    ]
    note = c.single_variant_note(m)
    if note:
        parts.append(f'<p class="sme2-note">{html.escape(note)}</p>')
    elif m.comparison is not None:
        parts.append(f"<p>SME2 speedup: {html.escape(c.speedup_text(m))}</p>")
    parts.append('<div class="sme2-charts">')
    for name, png in charts.items():
        parts.append(
            f'<img class="sme2-chart" data-chart="{html.escape(name)}" '
            f'alt="{html.escape(name)} chart" '
            f'src="{data_uri(png)}">'
        )
    parts.append("</div>")
    parts += map(section_html, s.case_sections(m, verdicts, s.View.BRIEF, links=links))
    parts.append("</div>")
    return "".join(parts)


def scaling_html(views: Sequence[ScalingView]) -> str:
    """The session's thread-scaling views for the HTML summary: each one's chart (where a
    variant has two figures to draw), table and knee sentences."""
    parts = [_STYLE, '<div class="sme2-report sme2-scaling"><h2>SME2 thread scaling</h2>']
    for view in views:
        section = s.scaling_section(view, brief=False)
        parts.append(f"<h3>{html.escape(section.title)}</h3>")
        if any(knee.threads is not None for knee in view.scaling.knees):
            alt = html.escape(f"thread scaling chart of {view.title}")
            parts.append(
                f'<img class="sme2-chart" data-chart="scaling" alt="{alt}" '
                f'src="{data_uri(scaling_chart(view))}">'
            )
        parts += map(_part, section.parts)
    parts.append("</div>")
    return "".join(parts)


def unmeasured_log(outcome: str, reason: str, traceback: str, log: Sequence[str]) -> list[str]:
    """pytest-html's log of a case that ended unmeasured, opening on its one-line reason.

    ``log`` is pytest-html's: the escaped traceback (when there is one) first, then the captured
    sections. A traceback that says more than the reason (a real error) stays, collapsed under
    it; one that is the reason (an export's xfail) is not repeated.
    """
    head = f'<div class="sme2-reason">{html.escape(outcome)}: {html.escape(reason)}</div>'
    if not traceback:
        return [head, *log]
    if traceback == reason:
        return [head + "\n", *log[1:]]
    collapsed = f"<details><summary>traceback</summary>{html.escape(traceback)}</details>\n"
    return [head + collapsed, *log[1:]]


def summary_html(report: SessionReport) -> list[str]:
    """The session report model (:mod:`pytest_sme2.report.session_report`) for the top of the
    pytest-html page, one block each: the machine classes with no time record, the devices side by
    side, the thread scaling, the cases not measured, the SME2 losses, the gates skipped, the
    baselines written and those no case uses.
    The tests themselves are the page's result table (:func:`row_cells`)."""
    blocks = [
        f'<p class="sme2-untimed">pytest-sme2: {html.escape(line)}</p>' for line in report.untimed
    ]
    if report.fleet is not None:
        blocks.append(
            '<h2 class="sme2-fleet">SME2 across devices</h2>'
            f"<p>{html.escape(c.FLEET_NOTE)}</p>" + report.fleet.html("sme2-table sme2-fleet")
        )
    if report.scaling:
        blocks.append(scaling_html(report.scaling))
    if report.unmeasured:
        blocks.append(
            '<p class="sme2-unmeasured">pytest-sme2: not measured:</p>'
            + _list([f"{nodeid}: {how}: {why}" for nodeid, how, why in report.unmeasured])
        )
    if report.losses:
        blocks.append('<p class="sme2-losses">pytest-sme2: SME2 losses:</p>' + _list(report.losses))
    if report.skipped:
        blocks.append(
            '<p class="sme2-skipped">pytest-sme2: gates the device could not judge:</p>'
            + _list(report.skipped)
        )
    if report.baseline_changes:
        written = "".join(
            f"<li>{html.escape(changed.path)}{_list(changed.changes)}</li>"
            for changed in report.baseline_changes
        )
        blocks.append(
            f'<p class="sme2-baselines">pytest-sme2: baselines written:</p><ul>{written}</ul>'
        )
    if report.unused_lines:
        head, *paths = report.unused_lines
        blocks.append(
            f'<p class="sme2-unused">pytest-sme2: {html.escape(head)}</p>'
            + _list([path.strip() for path in paths])
        )
    return blocks
