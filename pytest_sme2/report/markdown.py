"""report.md: per test and per session, written to be pasted into a pull request.

A test's report is its heading, verdict line and the full view of its sections
(:mod:`pytest_sme2.report.sections`), rendered here. Where the device ran one variant only, the
report says so once instead of showing empty comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Verdict
from pytest_sme2.report import content as c
from pytest_sme2.report import format as fmt
from pytest_sme2.report import sections as s
from pytest_sme2.report.format import Table
from pytest_sme2.report.scaling_view import scaling_views


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


@dataclass(frozen=True)
class SessionEntry:
    """One test of a session: its id, measurement, verdicts and where its report.md is."""

    nodeid: str
    measurement: Measurement
    verdicts: tuple[Verdict, ...]
    report_md: Path | None = None


def session_report(
    entries: Sequence[SessionEntry],
    *,
    base: Path | None = None,
    unmeasured: Sequence[tuple[str, str, str]] = (),
) -> str:
    """One table row per test, the cases that ended unmeasured with their one-line reasons
    (``unmeasured``: node id, outcome, reason — an export that failed is an xfail), then every
    test's report with its headings one level down.

    ``base`` makes the links to per-test report.md files relative (the session report's folder).
    """
    rows = [c.summary_row(e.measurement, e.verdicts) for e in entries]
    # a column only some rows have (tokens per second: language models only) reads "—" elsewhere
    keys = list(dict.fromkeys(key for row in rows for key in row))
    table = fmt.Table(
        ("test", *keys),
        tuple(
            (e.nodeid, *(row.get(key, "—") for key in keys))
            for e, row in zip(entries, rows, strict=True)
        ),
    )
    failed = sum(1 for e in entries if any(v.status.value == "fail" for v in e.verdicts))
    parts = [
        "# SME2 session report",
        f"{len(entries)} test(s), {failed} with failed gates.",
        table.markdown(),
    ]
    if unmeasured:
        parts.append(
            "## Not measured\n\n"
            + fmt.Table(("test", "outcome", "reason"), tuple(sorted(unmeasured))).markdown()
        )
    fleet = c.fleet_table([e.measurement for e in entries])
    if fleet is not None:
        parts.append(
            "## Across devices\n\nShares are of the headline variant (SME2-on where it ran).\n\n"
            + fleet.markdown()
        )
    for view in scaling_views(e.measurement for e in entries):
        parts.append(section_markdown(s.scaling_section(view, brief=False)))
    skipped = c.skipped_reasons([e.verdicts for e in entries])
    if skipped:
        parts.append("Gates the device could not judge:\n\n" + _bullets(skipped))
    for entry in entries:
        body = case_report(entry.measurement, entry.verdicts, title=entry.nodeid)
        demoted = "\n".join(
            "#" + line if line.startswith("#") else line for line in body.splitlines()
        )
        if entry.report_md is not None:
            where = _relative(entry.report_md, base)
            demoted += f"\n\nFull report with artifact links: [{where}]({where})"
        parts.append(demoted)
    return "\n\n".join(parts) + "\n"


def _relative(path: Path, base: Path | None) -> str:
    if base is None:
        return str(path)
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)
