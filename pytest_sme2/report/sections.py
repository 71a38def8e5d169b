"""A case report as data: its sections, built once, drawn by :mod:`~pytest_sme2.report.markdown`
(report.md) and :mod:`~pytest_sme2.report.html` (the pytest-html extra).

Both used to walk the same sections in the same order, each in its own markup, so every new
section was written twice and the two drifted. Here one small builder per section says what the
section holds, for either view: the full one (report.md, written to be pasted into a pull
request: every explaining sentence) or the brief one (the pytest-html extra, read beside the
charts: shorter headings, tables without the prose). Adding a section is one builder added to
:data:`BUILDERS`; the renderers only know the parts (paragraph, table, bullets, links).

Sections follow what the reference workflow's users look for (metadata, latency comparison,
category breakdown on vs off, acceleration per category, bottlenecks above 5 % of E2E, delegated
vs non-delegated, SME2 kernel evidence, recommendations) plus the operators SME2 made dearer and the
gate verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from pytest_sme2.judge.sme2_losses import judged_floor, losses_for_report
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Verdict
from pytest_sme2.report import advice
from pytest_sme2.report import content as c
from pytest_sme2.report import efficiency_view as w
from pytest_sme2.report import evidence as e
from pytest_sme2.report import format as fmt
from pytest_sme2.report.format import Table
from pytest_sme2.report.load import load_line, load_table
from pytest_sme2.report.numerics_text import numerics_table
from pytest_sme2.report.scaling_view import (
    DEFINITIONS,
    ScalingView,
    case_view,
    knee_lines,
    scaling_table,
)
from pytest_sme2.report.throughput import phase_line, throughput_table

#: The section of every case report that lists the operators SME2 made dearer.
LOSSES_TITLE = "SME2 losses"


class View(Enum):
    """Who reads the sections: report.md (everything) or the pytest-html extra (brief)."""

    FULL = "full"
    BRIEF = "brief"


@dataclass(frozen=True)
class Paragraph:
    """A sentence or a few; an empty one is left out of report.md (no stray blank line)."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A bullet list of already worded lines."""

    items: tuple[str, ...]


@dataclass(frozen=True)
class Links:
    """(label, relative path or href) pairs, as a bullet list of links."""

    links: tuple[tuple[str, str], ...]


Part = Paragraph | Table | Bullets | Links


@dataclass(frozen=True)
class Section:
    """A headed section of a case report: its title and its parts, in order."""

    title: str
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class Case:
    """What a section is built from: the measurement, its verdicts, the artifact links and the
    view the sections are for."""

    m: Measurement
    verdicts: tuple[Verdict, ...]
    links: tuple[tuple[str, str], ...]
    view: View

    @property
    def brief(self) -> bool:
        return self.view is View.BRIEF


def _metadata(case: Case) -> Section | None:
    if case.brief:  # the result table's columns already say it
        return None
    return Section("Metadata", (c.metadata_table(case.m),))


def _instructions(case: Case) -> Section | None:
    """Where emulated time means nothing: the instructions of one inference instead."""
    m = case.m
    if not fmt.counts_instructions(m):
        return None
    title = f"Instructions per inference ({e.instruction_source(m)})"
    if case.brief:
        return Section(title, (e.instruction_table(m),))
    split = (
        "Categories, shares and operators below are in guest instructions of that "
        "inference, split at the clock reads that stamp its trace events."
    )
    return Section(title, (e.instruction_table(m), Paragraph(split)))


def _latency(case: Case) -> Section | None:
    m = case.m
    if fmt.counts_instructions(m):
        return None
    if case.brief:
        return Section(f"Latency ({fmt.latency_source(m)})", (c.latency_table(m),))
    parts: list[Part] = [c.latency_table(m)]
    comparison = m.comparison
    if comparison is not None:
        parts.append(
            Paragraph(
                f"**Speedup** (median {Variant.OFF} ÷ median {Variant.ON}, "
                f"{fmt.latency_source(m)}): {c.speedup_text(m)}; bootstrap 95 % interval"
                + (", resampled by interleaved round" if comparison.speedup.paired else "")
                + "."
            )
        )
    if not m.device.time_meaningful:
        parts.append(
            Paragraph(
                f"Time on {m.device.name} is not a performance signal "
                f"({m.device.limits.get('latency', 'emulated')}); read the structure, not the "
                "clock."
            )
        )
    return Section(f"Latency (E2E per run, {fmt.latency_source(m)})", tuple(parts))


def scaling_section(view: ScalingView, brief: bool, title: str = "") -> Section:
    """A thread-scaling view (:mod:`pytest_sme2.report.scaling_view`): its table, each variant's
    knee in one sentence, and in the full view what the numbers are."""
    parts: list[Part] = [scaling_table(view), Bullets(knee_lines(view))]
    if not brief:
        parts.append(Paragraph(DEFINITIONS))
    return Section(title or f"Thread scaling: {view.title}", tuple(parts))


def _threads(case: Case) -> Section | None:
    """The case's own 1-thread and N-thread runs, where a thread-gain floor timed both."""
    view = case_view(case.m)
    if view is None:
        return None
    title = f"Threads (1 and {case.m.threads}, timed in the same rounds)"
    return scaling_section(view, case.brief, title)


def _throughput(case: Case) -> Section | None:
    tokens = throughput_table(case.m)
    if tokens is None:
        return None
    return Section("Throughput", (tokens, Paragraph(phase_line(case.m) or "")))


def _load(case: Case) -> Section | None:
    loading = load_table(case.m)
    if loading is None:
        return None
    return Section("Load and memory", (loading, Paragraph(load_line(case.m) or "")))


def _categories(case: Case) -> Section:
    m = case.m
    if case.brief:
        return Section(f"Categories (mean {fmt.unit(m)} per traced run)", (c.category_table(m),))
    residual = (
        "Other is the residual: E2E minus the four named categories (framework overhead, "
        "pooling, normalization, softmax, reductions)."
    )
    return Section(
        f"Category breakdown (mean {fmt.unit(m)} per traced run, share of E2E)",
        (c.category_table(m), Paragraph(residual)),
    )


def _acceleration(case: Case) -> Section | None:
    if case.brief or case.m.comparison is None:
        return None
    return Section("Acceleration per category", (Bullets(tuple(c.acceleration_lines(case.m))),))


def _operators(case: Case) -> Section:
    """The operators to look at: the top ten (brief), or those above the bottleneck share."""
    m, head = case.m, case.m.headline
    if case.brief:
        return Section(f"Top operators by share of E2E ({head})", (c.operator_table(m, head),))
    share = f"{100 * c.BOTTLENECK_SHARE:.0f} % of E2E"
    worst = c.bottlenecks(m, head)
    return Section(
        f"Bottlenecks (> {share}, {head})",
        (
            c.operator_table(m, head, worst)
            if worst
            else Paragraph(f"No operator takes more than {share}."),
        ),
    )


def _delegation(case: Case) -> Section:
    """Delegated vs non-delegated time; report.md lists the non-delegated operators here too."""
    m, head = case.m, case.m.headline
    headline = c.non_delegated_headline(m)
    parts: list[Part] = [Paragraph(headline)] if headline else []
    parts.append(c.delegation_table(m))
    if not case.brief:
        outside = c.non_delegated(m, head)
        parts += (
            [Paragraph(f"Non-delegated operators ({head}):"), c.operator_table(m, head, outside)]
            if outside
            else [Paragraph(f"Every operator is delegated ({head}).")]
        )
    return Section("Delegated vs non-delegated", tuple(parts))


def _non_delegated(case: Case) -> Section | None:
    """The brief view's own section of non-delegated operators (report.md's is in
    :func:`_delegation`)."""
    if not case.brief:
        return None
    m, head = case.m, case.m.headline
    outside = c.non_delegated(m, head)
    return Section(
        f"Non-delegated operators ({head})",
        (
            c.operator_table(m, head, outside)
            if outside
            else Paragraph("None: every operator is delegated."),
        ),
    )


def _evidence(case: Case) -> Section:
    title = "SME2 evidence" if case.brief else "SME2 kernel evidence"
    return Section(title, (Bullets(tuple(e.evidence_lines(case.m))),))


def _kernels(case: Case) -> Section | None:
    kernels = e.kernel_table(case.m)
    return None if kernels is None else Section(e.KERNEL_VIEW_TITLE, (kernels,))


def _work(case: Case) -> Section:
    """Each GEMM and convolution operator's multiply-adds and how near its cost came to the
    limit: per SME instruction against a full-tile outer product (emulated), GFLOP/s against
    the chip's peak (timed)."""
    view = w.efficiency_view(case.m)
    if view is None:
        unknown = "Work unknown: the program has no ETRecord whose edge program gives shapes."
        return Section(w.WORK_TITLE, (Paragraph(unknown),))
    table = w.operator_table(view, w.BRIEF_ROWS if case.brief else w.FULL_ROWS)
    lines = Bullets(tuple(w.summary_lines(case.m, view)))
    if case.brief:
        return Section(w.WORK_TITLE, (lines, table))
    return Section(w.WORK_TITLE, (Paragraph(w.explanation(view)), lines, table))


def _coverage(case: Case) -> Section | None:
    """SME2-on's share of the GEMM and convolution work in SME2 kernels, the operators outside
    SME2, and the SME2 ones whose instructions go mostly to packing."""
    view = w.coverage_view(case.m, w.BRIEF_ROWS if case.brief else w.FULL_ROWS)
    if view is None:
        return None
    parts: list[Part] = [Paragraph(view.sentence)]
    if view.outside is not None:
        parts.append(view.outside)
    if view.packing:
        parts.append(Bullets(view.packing))
    return Section(w.COVERAGE_TITLE, tuple(parts))


def _losses(case: Case) -> Section:
    """Every operator that cost more with SME2 on than off, at no tolerance (above the size the
    gate judges): the gate fails those beyond it, and the near misses it lets pass are what to
    watch."""
    found = losses_for_report(case.m)
    if found is None:
        return Section(LOSSES_TITLE, (Paragraph("Not compared: no SME2-on and SME2-off pair."),))
    if isinstance(found, str):
        return Section(LOSSES_TITLE, (Paragraph(found[0].upper() + found[1:] + "."),))
    if not found:
        none = (
            f"None: no operator of {judged_floor(case.m)} or more per run costs more with SME2 on."
        )
        return Section(LOSSES_TITLE, (Paragraph(none),))
    note = (
        f"Operators of {judged_floor(case.m)} or more per run that cost more with SME2 on than "
        "off, at any margin; the sme2-losses gate fails those beyond its tolerance (its verdict "
        "below)."
    )
    table = c.losses_table(found)
    return Section(LOSSES_TITLE, (table,) if case.brief else (Paragraph(note), table))


def _numerics(case: Case) -> Section | None:
    numerics = numerics_table(case.m)
    return None if numerics is None else Section("Numerics", (numerics,))


def _verdicts(case: Case) -> Section:
    if case.verdicts:
        return Section("Gate verdicts", (c.verdict_table(case.verdicts),))
    none = "No gate was judged." if case.brief else "No gate was judged for this test."
    return Section("Gate verdicts", (Paragraph(none),))


def _recommendations(case: Case) -> Section:
    return Section("Recommendations", (Bullets(tuple(advice.recommendations(case.m))),))


def _artifacts(case: Case) -> Section | None:
    return Section("Artifacts", (Links(case.links),)) if case.links else None


#: The section builders, in report order; each returns None where its section does not apply.
BUILDERS: tuple[Callable[[Case], Section | None], ...] = (
    _metadata,
    _instructions,
    _latency,
    _threads,
    _throughput,
    _load,
    _categories,
    _acceleration,
    _operators,
    _delegation,
    _non_delegated,
    _evidence,
    _kernels,
    _work,
    _coverage,
    _losses,
    _numerics,
    _verdicts,
    _recommendations,
    _artifacts,
)


def case_sections(
    m: Measurement,
    verdicts: Sequence[Verdict],
    view: View,
    *,
    links: Sequence[tuple[str, str]] = (),
) -> tuple[Section, ...]:
    """The sections of one case's report for ``view``; ``links`` are (label, path) pairs."""
    case = Case(m, tuple(verdicts), tuple(links), view)
    return tuple(s for build in BUILDERS if (s := build(case)) is not None)
