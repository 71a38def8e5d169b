"""What every report says, as tables and sentences; :mod:`~pytest_sme2.report.sections` puts
them in a case report's sections, ``markdown`` and ``html`` only render them.

One function per statement a reader looks for (latency, categories, bottlenecks, delegation,
verdicts), so report.md, the pytest-html extras and ``sme2 report`` cannot disagree on a number.
Values come from the analysis (``Profile``, ``Comparison``); nothing is recomputed here except
sums and ratios of those values. What the device's evidence says about SME2 is in
:mod:`pytest_sme2.report.evidence`, the advice drawn from both in :mod:`pytest_sme2.report.advice`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pytest_sme2.analysis.categories import CATEGORIES
from pytest_sme2.analysis.kernels import BOTTLENECK_SHARE
from pytest_sme2.analysis.losses import OperatorLoss
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.analysis.profile import OTHER, Profile, per_run_by_kind
from pytest_sme2.judge.sme2_coverage import variant_coverage
from pytest_sme2.judge.sme2_losses import LOSS_GATES
from pytest_sme2.judge.time_gates import LATENCY_SENSITIVITY, NO_TIME_RECORD
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.device import Variant, describe_class
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict
from pytest_sme2.report.format import (
    Table,
    counts_instructions,
    e2e_text,
    ms,
    off_on_label,
    ordered_variants,
    pct,
    ratio,
    timing_stats,
    unit,
)
from pytest_sme2.report.load import init_text
from pytest_sme2.report.numerics_text import numerics_text
from pytest_sme2.report.throughput import per_token_text


def single_variant_note(m: Measurement) -> str | None:
    """Why there is no on/off comparison, when the device ran one variant only."""
    if m.comparison is not None:
        return None
    (only,) = m.variants
    missing = Variant.ON if only is Variant.OFF else Variant.OFF
    reason = m.device.limits.get("speedup") or (
        f"{m.device.name} has no SME2" if not m.device.has_sme2 else f"{missing} was not run"
    )
    return (
        f"Only {only} was measured ({reason}): there is no {missing} variant, so no speedup, "
        "no per-category acceleration and no bottleneck shift to report."
    )


def speedup_text(m: Measurement) -> str:
    """The speedup with its interval; where time means nothing, the instruction ratio, labelled
    as such; else why there is neither."""
    comparison = m.comparison
    if comparison is None:
        return "—"
    if not m.device.time_meaningful:
        if m.instruction_ratio is not None:
            return f"instruction ratio {m.instruction_ratio:.2f}× (off ÷ on)"
        return "n/a (" + m.device.limits.get("speedup", "time not meaningful") + ")"
    return comparison.speedup.describe()


def verdict_word(verdicts: Sequence[Verdict]) -> str:
    """ "pass" / "pass, re-measured" / "FAIL (n)", plus how many gates the device could not
    judge. "re-measured": the first measurement failed a time gate, a fresh one passed."""
    failed = sum(v.status is Status.FAIL for v in verdicts)
    skipped = sum(v.status is Status.SKIP for v in verdicts)
    word = f"FAIL ({failed})" if failed else ("pass" if verdicts else "not judged")
    if not failed and any(v.gate == "confirmed" for v in verdicts):
        word = "pass, re-measured"
    return word + (f", {skipped} skipped" if skipped else "")


def metadata_table(m: Measurement) -> Table:
    rows = [
        ("model", m.model),
        ("dtype", m.dtype),
        ("threads", str(m.threads)),
        ("device", m.device.name),
        ("has SME2", "yes" if m.device.has_sme2 else "no"),
        ("variants measured", ", ".join(str(v) for v in ordered_variants(m))),
        ("time meaningful", "yes" if m.device.time_meaningful else "no"),
        ("on/off interleaved", "yes" if m.interleaved else "no"),
    ]
    for variant in ordered_variants(m):
        vm = m.variants[variant]
        timing = f"{len(vm.latencies_ms)} timing-only, " if vm.timing_warmup is not None else ""
        rows.append(
            (
                f"runs ({variant})",
                f"{timing}{vm.profile.runs} traced (+{vm.profile.warmup} traced warm-up dropped)",
            )
        )
        if vm.seen is not None:  # what proves the label (judge.label_gate)
            rows.append((f"runner saw ({variant})", f"{vm.seen.describe()}, by {vm.seen.source}"))
    if m.device.machine_class:
        rows.append(("machine class", m.device.class_id))
    rows += [(f"class: {k}", v) for k, v in sorted(m.device.machine_class.items())]
    rows += [(f"note: {k}", v) for k, v in sorted(m.device.notes.items())]
    return Table(("", "value"), tuple(rows))


def latency_table(m: Measurement) -> Table:
    """Timing-only E2E per variant: median, mean, min, max, std, CV, and the median speedup."""
    rows = []
    for variant in ordered_variants(m):
        s = timing_stats(m, variant)
        rows.append(
            (
                str(variant),
                str(s.count),
                ms(s.median_ms),
                ms(s.mean_ms),
                ms(s.min_ms),
                ms(s.max_ms),
                ms(s.std_ms),
                f"{s.cv_percent:.1f}%",
            )
        )
    headers = ("variant", "runs", "median ms", "mean ms", "min ms", "max ms", "std ms", "CV")
    return Table(headers, tuple(rows))


def category_table(m: Measurement) -> Table:
    """Mean ms per traced run and share of E2E per category; with both variants, the speedup
    (off ÷ on) and the share change in points."""
    comparison = m.comparison
    if comparison is None:
        prof = m.variants[m.headline].profile
        shares = prof.shares
        rows = [(c, ms(prof.categories_ms[c]), pct(shares[c])) for c in CATEGORIES]
        rows.append(("E2E (mean)", ms(prof.latency.mean_ms), pct(1.0)))
        return Table(("category", f"{prof.unit}/run", "share"), tuple(rows))
    off, on = comparison.off, comparison.on
    off_shares, on_shares = off.shares, on.shares
    speedups = comparison.category_speedups
    rows = [
        (
            c,
            ms(off.categories_ms[c]),
            pct(off_shares[c]),
            ms(on.categories_ms[c]),
            pct(on_shares[c]),
            ratio(speedups[c]),
            f"{100 * (on_shares[c] - off_shares[c]):+.1f}",
        )
        for c in CATEGORIES
    ]
    e2e_speedup = off.latency.mean_ms / on.latency.mean_ms if on.latency.mean_ms else None
    rows.append(
        (
            "E2E (mean)",
            ms(off.latency.mean_ms),
            pct(1.0),
            ms(on.latency.mean_ms),
            pct(1.0),
            ratio(e2e_speedup),
            "",
        )
    )
    headers = (
        "category",
        f"{Variant.OFF} {unit(m)}/run",
        f"{Variant.OFF} share",
        f"{Variant.ON} {unit(m)}/run",
        f"{Variant.ON} share",
        off_on_label(m),
        "share Δ (points)",
    )
    return Table(headers, tuple(rows))


def acceleration_lines(m: Measurement) -> list[str]:
    """Per-category acceleration, largest first, and where the biggest share moved."""
    comparison = m.comparison
    if comparison is None:
        return []
    speedups = comparison.category_speedups
    lines = []
    for c in sorted((c for c in CATEGORIES if c != OTHER), key=lambda c: -(speedups[c] or 0.0)):
        off_ms, on_ms = comparison.off.categories_ms[c], comparison.on.categories_ms[c]
        if off_ms <= 0 and on_ms <= 0:
            continue
        lines.append(f"{c}: {ms(off_ms)} → {ms(on_ms)} {unit(m)}/run ({ratio(speedups[c])})")
    off_top = _top_category(comparison.off)
    on_top = _top_category(comparison.on)
    if off_top != on_top:
        lines.append(
            f"Bottleneck shift: the largest category was {off_top} "
            f"({pct(comparison.off.shares[off_top])}) with {Variant.OFF} and is {on_top} "
            f"({pct(comparison.on.shares[on_top])}) with {Variant.ON}."
        )
    else:
        lines.append(
            f"No bottleneck shift: {on_top} stays the largest category "
            f"({pct(comparison.off.shares[on_top])} → {pct(comparison.on.shares[on_top])})."
        )
    return lines


def _top_category(prof: Profile) -> str:
    shares = prof.shares
    return max(CATEGORIES, key=lambda c: shares[c])


def operator_table(m: Measurement, variant: Variant, operators: Sequence | None = None) -> Table:
    """Operators (default: the top 10 by time) with count, total, share of E2E and delegation;
    with both variants, the other variant's ms/run of the same operator kind (matched with
    ``OpName.unpacked_key``, summed when several names match) and the speedup off ÷ on."""
    prof = m.variants[variant].profile
    ops = prof.top_operators(10) if operators is None else operators
    comparison = m.comparison
    mine: dict[str, float] = {}
    theirs: dict[str, float] = {}
    if comparison is not None:
        other_prof = comparison.off if variant is Variant.ON else comparison.on
        mine, theirs = per_run_by_kind(prof), per_run_by_kind(other_prof)
    rows = []
    for op in ops:
        row = [
            op.name,
            op.category,
            f"{op.count / prof.runs:g}",
            ms(op.total_ms),
            ms(op.per_run_ms),
            pct(op.share),
            "yes" if op.delegated else "no",
        ]
        if comparison is not None:
            key = parse_op_name(op.name).unpacked_key
            other_ms = theirs.get(key)
            off_ms, on_ms = (
                (mine[key], other_ms) if variant is Variant.OFF else (other_ms, mine[key])
            )
            row.append("—" if other_ms is None else ms(other_ms))
            row.append(ratio(off_ms / on_ms if off_ms is not None and on_ms else None))
        rows.append(tuple(row))
    u = prof.unit
    headers = ["operator", "category", "count/run", f"total {u}", f"{u}/run", "share", "delegated"]
    if comparison is not None:
        other_variant = Variant.OFF if variant is Variant.ON else Variant.ON
        headers += [f"{other_variant} {u}/run", off_on_label(m)]
    return Table(tuple(headers), tuple(rows))


def losses_table(losses: Sequence[OperatorLoss]) -> Table:
    """One row per SME2 loss: the operator, the kernels on each side (where the device shows
    them), its cost per run on and off, and how many times dearer SME2 made it."""
    rows = tuple(
        (
            loss.operator,
            ", ".join(loss.kernels_on) or "—",
            ", ".join(loss.kernels_off) or "—",
            loss.cost(loss.on),
            loss.cost(loss.off),
            f"×{loss.ratio:.2f}",
        )
        for loss in losses
    )
    headers = ("operator", "kernels on", "kernels off", "on/run", "off/run", "on ÷ off")
    return Table(headers, rows)


def loss_lines(outcomes: Iterable[tuple[Measurement, Sequence[Verdict]]]) -> list[str]:
    """Each SME2 loss the ``sme2-losses`` gate failed over a session, one line naming its case."""
    return [
        f"{case_name(m)}: {line}"
        for m, verdicts in outcomes
        for v in verdicts
        if v.status is Status.FAIL and v.gate in LOSS_GATES
        for line in v.details
    ]


def bottlenecks(m: Measurement, variant: Variant) -> tuple:
    """Operators above ``BOTTLENECK_SHARE`` of E2E, largest first."""
    return tuple(op for op in m.variants[variant].profile.operators if op.share > BOTTLENECK_SHARE)


def non_delegated(m: Measurement, variant: Variant) -> tuple:
    return tuple(op for op in m.variants[variant].profile.operators if not op.delegated)


#: non-delegated operators a delegation headline names at most
HEADLINE_OPERATORS = 3


def non_delegated_headline(m: Measurement) -> str | None:
    """The delegation view's first sentence, where the headline variant spends more than
    :data:`BOTTLENECK_SHARE` of E2E outside the delegate: how much, and the largest
    non-delegated operators with their shares. None otherwise.

    It leads because it dominates when it happens (a Whisper encoder spent 52 % of its SME2-on
    instructions in the attention mask's non-delegated ``where``/``eq``, a wav2vec2 fp32 68 % in
    one non-delegated convolution): work no delegate runs gets nothing from SME2, and a table of
    delegated milliseconds would bury it.
    """
    variant = m.headline
    prof = m.variants[variant].profile
    e2e = prof.latency.mean_ms
    if not e2e or prof.non_delegated_ms / e2e <= BOTTLENECK_SHARE:
        return None
    outside = non_delegated(m, variant)
    top = ", ".join(f"{op.name} {pct(op.share)}" for op in outside[:HEADLINE_OPERATORS])
    more = len(outside) - HEADLINE_OPERATORS
    rest = f" and {more} more kind(s)" if more > 0 else ""
    return (
        f"{pct(prof.non_delegated_ms / e2e)} of E2E ({variant}) runs outside the delegate, in "
        f"ExecuTorch's portable kernels, where SME2 cannot help: {top}{rest}."
    )


def delegation_table(m: Measurement) -> Table:
    """Time inside delegate calls vs in ExecuTorch's own kernels (``OPERATOR_CALL``) per run."""
    rows = []
    for variant in ordered_variants(m):
        prof = m.variants[variant].profile
        e2e = prof.latency.mean_ms
        rows.append(
            (
                str(variant),
                ms(prof.delegated_ms),
                pct(prof.delegated_ms / e2e if e2e else 0.0),
                ms(prof.non_delegated_ms),
                pct(prof.non_delegated_ms / e2e if e2e else 0.0),
                f"{prof.delegate_calls_per_run:g}",
                str(len(non_delegated(m, variant))),
            )
        )
    headers = (
        "variant",
        f"delegated {unit(m)}/run",
        "delegated share",
        f"non-delegated {unit(m)}/run",
        "non-delegated share",
        "delegate calls/run",
        "non-delegated operator kinds",
    )
    return Table(headers, tuple(rows))


def verdict_table(verdicts: Sequence[Verdict]) -> Table:
    rows = tuple(
        (
            v.gate,
            v.status.value,
            v.message + ("".join(f"\n  {d}" for d in v.details) if v.details else ""),
        )
        for v in verdicts
    )
    return Table(("gate", "status", "verdict"), rows)


def summary_row(m: Measurement, verdicts: Sequence[Verdict]) -> dict[str, str]:
    """One test as the session tables show it: case, E2E medians, speedup, the top
    category of the headline variant and the verdict."""
    head = m.headline
    shares = m.variants[head].profile.shares
    top = max(CATEGORIES, key=lambda c: shares[c])

    def median(variant: Variant) -> str:
        if variant not in m.variants:
            return "—"
        if counts_instructions(m):
            return e2e_text(m, variant)
        return ms(timing_stats(m, variant).median_ms)

    row = {
        "model": m.model,
        "dtype": m.dtype,
        "device": m.device.name + (f" t{m.threads}" if m.threads != 1 else ""),
        "E2E off ms": median(Variant.OFF),
        "E2E on ms": median(Variant.ON),
        "speedup": speedup_text(m),
    }
    if m.tokens:  # a language model's phase: its throughput as users compare it
        row["per token (on)"] = per_token_text(m, head)
    row["method init"] = init_text(m.variants[head].load)
    return {
        **row,
        "SME2 kernels (on)": sme2_kernels_text(m),
        "SME2 coverage (on)": coverage_text(m),
        "top category": f"{top} {100 * shares[top]:.0f}% ({head})",
        "latency gate sees": latency_sensitivity(verdicts),
        "numerics": numerics_text(m),
        "verdict": verdict_word(verdicts),
    }


def sme2_kernels_text(m: Measurement) -> str:
    """How many SME2 kernels SME2-on executed, where the device shows executed kernels (its
    evidence run); "—" where it shows none or SME2-on was not measured. "none" is news: an
    SME2-on run of a model with GEMMs that ran NEON (8da4w's QB4W GEMMs have no SME2 path)."""
    on = m.variants.get(Variant.ON)
    if on is None or on.evidence is None or not on.evidence.source:
        return "—"
    kernels = on.evidence.sme2_kernels
    return f"{len(kernels)} ran" if kernels else "none"


def coverage_text(m: Measurement) -> str:
    """SME2-on's share of the GEMM and convolution work run in SME2 kernels ("87.5%"), where its
    work is known on a device with SME2; "—" elsewhere."""
    on = m.variants.get(Variant.ON)
    coverage = variant_coverage(on) if on is not None and m.device.has_sme2 else None
    percent = coverage.percent if coverage is not None else None
    return "—" if percent is None else f"{percent:.1f}%"


def latency_sensitivity(verdicts: Sequence[Verdict]) -> str:
    """The smallest slowdown the case's latency gate sees on this machine class ("4.2%"), or its
    default tolerance where it is not calibrated; "—" where latency was not judged."""
    sensitivity = next((v for v in verdicts if v.gate == LATENCY_SENSITIVITY), None)
    return sensitivity.details[0] if sensitivity is not None else "—"


#: What the shares of :func:`fleet_table` are, said under it wherever it is shown.
FLEET_NOTE = "Shares are of the headline variant (SME2-on where it ran)."


def fleet_table(measurements: Sequence[Measurement]) -> Table | None:
    """The kit's cross-device comparison: per case and device, E2E SME2-off and on, the speedup
    (or instruction ratio) and each category's share of the headline variant, the devices of a
    case side by side; None unless the session measured on more than one device."""
    if len({m.device.name for m in measurements}) < 2:
        return None
    rows = []
    for m in sorted(measurements, key=lambda m: (m.model, m.dtype, m.threads, m.device.name)):
        row = summary_row(m, ())
        shares = m.variants[m.headline].profile.shares
        rows.append(
            (
                row["model"],
                row["dtype"],
                row["device"],
                row["E2E off ms"],
                row["E2E on ms"],
                row["speedup"],
                *(pct(shares[category]) for category in CATEGORIES),
            )
        )
    headers = ("model", "dtype", "device", "E2E off", "E2E on", "speedup", *CATEGORIES)
    return Table(headers, tuple(rows))


def skipped_reasons(verdict_lists: Sequence[Sequence[Verdict]]) -> list[str]:
    """Distinct reasons of skipped gates over a session, sorted; a missing time record is
    counted by :func:`untimed_summary` instead of being listed once per case."""
    return sorted(
        {
            v.message
            for vs in verdict_lists
            for v in vs
            if v.status is Status.SKIP and v.gate != NO_TIME_RECORD
        }
    )


def untimed_class(m: Measurement, verdicts: Sequence[Verdict]) -> str | None:
    """The machine class this test had no time record for (id and description), else None."""
    if any(v.gate == NO_TIME_RECORD and v.status is Status.SKIP for v in verdicts):
        return f"{m.device.class_id} ({describe_class(m.device.machine_class)})"
    return None


def untimed_summary(untimed: Mapping[str, int], total: int) -> list[str]:
    """One sentence per machine class that lacked time records: how many cases, and what to run.

    A new machine (another CPU, another torch) has no time record yet; its portable gates were
    judged and its time gates were not, which a reader must see at a glance.
    """
    return [
        f"no time record for this machine class in {count} of {total} cases: {name}; latency, "
        "shares and speedup were not judged against the baseline (record them with "
        "--sme2-update-baselines)"
        for name, count in sorted(untimed.items())
    ]
