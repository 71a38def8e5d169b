"""report.md: per test and per session, written to be pasted into a pull request.

Sections follow what the reference workflow's users look for (metadata, latency comparison,
category breakdown on vs off, acceleration per category, bottlenecks above 5 % of E2E, delegated
vs non-delegated, SME2 kernel evidence, recommendations) plus the gate verdicts. Where the device
ran one variant only, the report says so once instead of showing empty comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.judge.verdict import Verdict
from pytest_sme2.report import advice
from pytest_sme2.report import content as c
from pytest_sme2.report import evidence as e
from pytest_sme2.report import format as fmt
from pytest_sme2.report.load import load_line, load_table
from pytest_sme2.report.throughput import phase_line, throughput_table
from pytest_sme2.run.devices.base import Variant
from pytest_sme2.run.measurement import Measurement


def _section(title: str, *body: str) -> str:
    return "\n\n".join([f"## {title}", *(b for b in body if b)])


def _bullets(lines: Sequence[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


def case_report(
    m: Measurement,
    verdicts: Sequence[Verdict],
    *,
    links: Sequence[tuple[str, str]] = (),
    title: str | None = None,
) -> str:
    """The markdown report of one measurement; ``links`` are (label, relative path) pairs."""
    head = m.headline
    note = c.single_variant_note(m)
    comparison = m.comparison
    parts = [
        f"# SME2 report: {title or fmt.case_title(m)}",
        f"**Verdict: {c.verdict_word(verdicts)}** · E2E median "
        + " · ".join(f"{v} {fmt.e2e_text(m, v)}" for v in fmt.ordered_variants(m))
        + (f" · speedup {c.speedup_text(m)}" if comparison is not None else ""),
    ]
    if note:
        parts.append(f"> {note}")
    parts.append(_section("Metadata", c.metadata_table(m).markdown()))

    latency = [c.latency_table(m).markdown()]
    if comparison is not None:
        s = comparison.speedup
        latency.append(
            f"**Speedup** (median {Variant.OFF} ÷ median {Variant.ON}, {fmt.latency_source(m)}): "
            f"{c.speedup_text(m)}; bootstrap 95 % interval"
            + (", resampled by interleaved round" if s.paired else "")
            + "."
        )
    if not m.device.time_meaningful:
        latency.append(
            f"Time on {m.device.name} is not a performance signal "
            f"({m.device.limits.get('latency', 'emulated')}); read the structure, not the clock."
        )
    if fmt.counts_instructions(m):  # emulated time means nothing: instructions instead
        parts.append(
            _section(
                f"Instructions per inference ({e.instruction_source(m)})",
                e.instruction_table(m).markdown(),
                "Categories, shares and operators below are in guest instructions of that "
                "inference, split at the clock reads that stamp its trace events.",
            )
        )
    else:
        parts.append(_section(f"Latency (E2E per run, {fmt.latency_source(m)})", *latency))

    tokens = throughput_table(m)
    if tokens is not None:
        parts.append(_section("Throughput", tokens.markdown(), phase_line(m) or ""))
    loading = load_table(m)
    if loading is not None:
        parts.append(_section("Load and memory", loading.markdown(), load_line(m) or ""))
    parts.append(
        _section(
            f"Category breakdown (mean {fmt.unit(m)} per traced run, share of E2E)",
            c.category_table(m).markdown(),
            "Other is the residual: E2E minus the four named categories (framework overhead, "
            "pooling, normalization, softmax, reductions).",
        )
    )
    if comparison is not None:
        parts.append(_section("Acceleration per category", _bullets(c.acceleration_lines(m))))

    worst = c.bottlenecks(m, head)
    parts.append(
        _section(
            f"Bottlenecks (> {100 * c.BOTTLENECK_SHARE:.0f} % of E2E, {head})",
            c.operator_table(m, head, worst).markdown()
            if worst
            else f"No operator takes more than {100 * c.BOTTLENECK_SHARE:.0f} % of E2E.",
        )
    )
    outside = c.non_delegated(m, head)
    parts.append(
        _section(
            "Delegated vs non-delegated",
            c.non_delegated_headline(m) or "",
            c.delegation_table(m).markdown(),
            (
                f"Non-delegated operators ({head}):\n\n"
                + c.operator_table(m, head, outside).markdown()
            )
            if outside
            else f"Every operator is delegated ({head}).",
        )
    )
    parts.append(_section("SME2 kernel evidence", _bullets(e.evidence_lines(m))))
    kernels = e.kernel_table(m)
    if kernels is not None:
        parts.append(_section(e.KERNEL_VIEW_TITLE, kernels.markdown()))
    numerics = c.numerics_table(m)
    if numerics is not None:
        parts.append(_section("Numerics", numerics.markdown()))
    parts.append(
        _section(
            "Gate verdicts",
            c.verdict_table(verdicts).markdown()
            if verdicts
            else "No gate was judged for this test.",
        )
    )
    parts.append(_section("Recommendations", _bullets(advice.recommendations(m))))
    if links:
        parts.append(
            _section("Artifacts", _bullets([f"[{label}]({path})" for label, path in links]))
        )
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
