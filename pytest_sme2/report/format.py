"""The report's vocabulary: a Table (header, rows, how it renders as markdown and HTML), numbers
as every section prints them (ms, %, ×), the order variants are shown in, and what a case's
time is measured in (ms, or guest instructions under emulation).

Apart from :mod:`pytest_sme2.report.content` because every section module speaks it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_sme2.analysis.stats import LatencyStats
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement


@dataclass(frozen=True)
class Table:
    """A small table of already formatted cells, rendered to markdown or HTML."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def markdown(self) -> str:
        def line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

        align = [
            "---" if i == 0 else "---:" if _numeric(self, i) else "---"
            for i in range(len(self.headers))
        ]
        return "\n".join(
            [line(self.headers), "| " + " | ".join(align) + " |", *map(line, self.rows)]
        )

    def html(self, css_class: str = "sme2-table") -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        return (
            f'<table class="{css_class}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>"
        )


def _numeric(table: Table, column: int) -> bool:
    """Right-align a column whose cells all start like a number ("1.23", "45.6%", "2.10×")."""
    cells = [row[column] for row in table.rows if row[column] not in ("", "—")]
    return bool(cells) and all(c[:1].isdigit() or c[:1] in "-+" for c in cells)


def ms(value: float) -> str:
    return f"{value:.3f}"


def pct(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def unit(m: Measurement) -> str:
    """What the profiles' values are: ``ms``, or ``M instr`` (millions of guest instructions)
    where the device counts instructions because its time means nothing (qemu-sme2)."""
    return m.variants[m.headline].profile.unit


def counts_instructions(m: Measurement) -> bool:
    return m.variants[m.headline].profile.counts_instructions


def off_on_label(m: Measurement) -> str:
    """The header of an off ÷ on column: a speedup in time, an instruction ratio otherwise."""
    return "instructions off ÷ on" if counts_instructions(m) else "speedup"


def ordered_variants(m: Measurement) -> list[Variant]:
    """Measured variants, SME2-off first: reports read "before → after"."""
    return [v for v in (Variant.OFF, Variant.ON) if v in m.variants]


def case_title(m: Measurement) -> str:
    threads = "" if m.threads == 1 else f", {m.threads} threads"
    return f"{m.model}[{m.dtype}] on {m.device.name}{threads}"


def timing_stats(m: Measurement, variant: Variant) -> LatencyStats:
    """Statistics of the variant's latencies (timing-only runs; see ``latency_source``)."""
    return LatencyStats.of(m.variants[variant].latencies_ms)


def e2e_text(m: Measurement, variant: Variant) -> str:
    """The variant's median E2E with its unit: timing-only milliseconds, or, where time means
    nothing, the counted inference's millions of instructions."""
    prof = m.variants[variant].profile
    if prof.counts_instructions:
        return f"{ms(prof.latency.median_ms)} {prof.unit}"
    return f"{ms(timing_stats(m, variant).median_ms)} ms"


def latency_source(m: Measurement) -> str:
    """Where the latencies come from: timing-only runs, or (for traces made elsewhere, which
    have no timing-only runs) the traced runs' E2E, which include the event tracer's cost."""
    if all(vm.timing_warmup is not None for vm in m.variants.values()):
        return "timing-only runs"
    return "traced runs' E2E (no timing-only runs; includes tracing overhead)"
