"""report.md: per test and per session, written to be pasted into a pull request.

A test's report is its heading, verdict line and the full view of its sections
(:mod:`pytest_sme2.report.sections`), rendered here. Where the device ran one variant only, the
report says so once instead of showing empty comparisons. The session's is its report model
(:mod:`pytest_sme2.report.session_report`) rendered, then every test's report.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Verdict
from pytest_sme2.report import content as c
from pytest_sme2.report import format as fmt
from pytest_sme2.report import sections as s
from pytest_sme2.report.format import Table
from pytest_sme2.report.session_report import SessionReport


def _bullets(lines: Sequence[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


def _part(part: s.Part) -> str:
    """One part in markdown; "" for an empty paragraph or list, which the section leaves out."""
    match part:
        case Table():
            return part.markdown()
        case s.Paragraph(text=text):
            return text
        case s.Bullets(items=items):
            return _bullets(items)
        case s.Links(links=links):
            return _bullets([f"[{label}]({path})" for label, path in links])
    raise TypeError(f"not a report part: {part!r}")


def section_markdown(section: s.Section) -> str:
    """A section under its ``##`` heading, its non-empty parts a blank line apart."""
    return "\n\n".join(
        [f"## {section.title}", *(text for text in map(_part, section.parts) if text)]
    )


def case_report(
    m: Measurement,
    verdicts: Sequence[Verdict],
    *,
    links: Sequence[tuple[str, str]] = (),
    title: str | None = None,
) -> str:
    """The markdown report of one measurement; ``links`` are (label, relative path) pairs."""
    parts = [
        f"# SME2 report: {title or fmt.case_title(m)}",
        f"**Verdict: {c.verdict_word(verdicts)}** · E2E median "
        + " · ".join(f"{v} {fmt.e2e_text(m, v)}" for v in fmt.ordered_variants(m))
        + (f" · speedup {c.speedup_text(m)}" if m.comparison is not None else ""),
    ]
    note = c.single_variant_note(m)
    if note:
        parts.append(f"> {note}")
    parts += map(section_markdown, s.case_sections(m, verdicts, s.View.FULL, links=links))
    return "\n\n".join(parts) + "\n"


def session_markdown(report: SessionReport, *, base: Path | None = None) -> str:
    """The session report.md: one table row per measured test, then what the session found
    (:class:`~pytest_sme2.report.session_report.SessionReport`, in the order of
    :func:`_session_parts`), then every test's report with its headings one level down.

    ``base`` makes the links to per-test report.md files relative (the session report's folder).
    """
    rows = [row.cells for row in report.rows]
    # a column only some rows have (tokens per second: language models only) reads "—" elsewhere
    keys = list(dict.fromkeys(key for row in rows for key in row))
    table = fmt.Table(
        ("test", *keys),
        tuple(
            (row.outcome.nodeid, *(row.cells.get(key, "—") for key in keys)) for row in report.rows
        ),
    )
    parts = [
        "# SME2 session report",
        f"{len(report.rows)} test(s), {report.failed} with failed gates.",
        table.markdown(),
        *_session_parts(report),
    ]
    for row in report.rows:
        outcome = row.outcome
        assert outcome.measurement is not None, "a row is a measured test"
        body = case_report(outcome.measurement, outcome.verdicts, title=outcome.nodeid)
        demoted = "\n".join(
            "#" + line if line.startswith("#") else line for line in body.splitlines()
        )
        if outcome.case_report is not None:
            where = _relative(outcome.case_report, base)
            demoted += f"\n\nFull report with artifact links: [{where}]({where})"
        parts.append(demoted)
    return "\n\n".join(parts) + "\n"


def _session_parts(report: SessionReport) -> list[str]:
    """What the session found beyond its rows: the machine classes with no time record, the
    cases not measured, the devices side by side, the thread scaling, the SME2 losses, the gates
    skipped, the baselines written and those no case uses."""
    parts = [_bullets(report.untimed)] if report.untimed else []
    if report.unmeasured:
        parts.append(
            "## Not measured\n\n"
            + fmt.Table(("test", "outcome", "reason"), report.unmeasured).markdown()
        )
    if report.fleet is not None:
        parts.append(f"## Across devices\n\n{c.FLEET_NOTE}\n\n" + report.fleet.markdown())
    for view in report.scaling:
        parts.append(section_markdown(s.scaling_section(view, brief=False)))
    if report.losses:
        parts.append("## SME2 losses\n\n" + _bullets(report.losses))
    if report.skipped:
        parts.append("Gates the device could not judge:\n\n" + _bullets(report.skipped))
    if report.baseline_changes:
        written = [
            f"- {changed.path}\n" + "\n".join(f"  - {change}" for change in changed.changes)
            for changed in report.baseline_changes
        ]
        parts.append("## Baselines written\n\n" + "\n".join(written))
    if report.unused_lines:
        head, *paths = report.unused_lines
        parts.append(f"## Unused baselines\n\n{head}\n\n" + _bullets([p.strip() for p in paths]))
    return parts


def _relative(path: Path, base: Path | None) -> str:
    if base is None:
        return str(path)
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)
