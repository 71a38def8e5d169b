"""What a report says of each GEMM and convolution operator's work and how near its cost came to
the hardware's limit (:mod:`pytest_sme2.analysis.work`, :mod:`pytest_sme2.analysis.efficiency`):
one view per measurement, read by the case report's section and the roofline chart.

Emulated devices are shown in multiply-adds per instruction (both variants) and per SME
instruction against one full-tile outer product at the run's SVL; timing devices in GFLOP/s
against the chip's peak. SME2-on and SME2-off operators are paired in order (the same program
nodes, in the same order, in both), where their shapes agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_sme2.analysis.coverage import Coverage
from pytest_sme2.analysis.efficiency import (
    FP32_BITS,
    CaseWork,
    OperatorEfficiency,
    case_work,
    counted_efficiency,
    ideal_macs_per_sme,
    timed_efficiency,
)
from pytest_sme2.errors import TraceError
from pytest_sme2.judge.sme2_coverage import variant_coverage
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement, VariantMeasurement
from pytest_sme2.report.format import Table, ordered_variants, pct

WORK_TITLE = "Work and efficiency"
#: operators the full view lists (the largest by work); the brief view lists fewer
FULL_ROWS = 15
BRIEF_ROWS = 8


@dataclass(frozen=True)
class EfficiencyView:
    """Per variant, its GEMM and convolution operators with their work and cost; ``counted``:
    the costs are instructions (else milliseconds); ``svl_bytes`` SME2-on's vector length."""

    variants: dict[Variant, tuple[OperatorEfficiency, ...]]
    counted: bool
    svl_bytes: int | None
    peak_source: str = ""

    def total(self, variant: Variant) -> CaseWork:
        return case_work(self.variants[variant])

    def pairs(self) -> list[tuple[OperatorEfficiency | None, OperatorEfficiency | None]]:
        """(SME2-on, SME2-off) of each operator, in program order; one side None where that
        variant was not measured or its operators do not pair up."""
        on, off = self.variants.get(Variant.ON, ()), self.variants.get(Variant.OFF, ())
        if on and off and [o.shape for o in on] == [o.shape for o in off]:
            return list(zip(on, off, strict=True))
        return [(op, None) for op in on] or [(None, op) for op in off]


def efficiency_view(m: Measurement) -> EfficiencyView | None:
    """The view of ``m``; None where no variant has work (no ETRecord with shapes)."""
    if not any(vm.work for vm in m.variants.values()):
        return None
    on = m.variants.get(Variant.ON)
    svl = on.seen.svl_bytes if on is not None and on.seen is not None else None
    counted = all(vm.profile.counts_instructions for vm in m.variants.values())
    found = {}
    for variant in ordered_variants(m):
        vm = m.variants[variant]
        if counted:
            evidence = vm.evidence
            operators = evidence.operator_kernels if evidence else ()
            sme = evidence.sme_functions if evidence else {}
            found[variant] = counted_efficiency(vm.work, operators, sme, svl)
        else:
            found[variant] = timed_efficiency(vm.work, _kept_runs(vm), m.peak)
    peak = m.peak.source if m.peak is not None else ""
    return EfficiencyView(found, counted, svl, peak)


def _kept_runs(vm: VariantMeasurement) -> tuple:
    try:
        return vm.parsed_trace().runs[vm.profile.warmup :]
    except (TraceError, OSError):
        return ()


def summary_lines(m: Measurement, view: EfficiencyView) -> list[str]:
    """One line per variant: the work, and what it cost per unit against the limit."""
    lines = []
    for variant in view.variants:
        total = view.total(variant)
        unknown = f"; work unknown for {total.unknown}" if total.unknown else ""
        head = (
            f"{variant}: {total.macs / 1e6:,.2f} M multiply-adds per inference in "
            f"{total.operators} GEMM and convolution operator(s){unknown}"
        )
        if view.counted:
            lines.append(head + _counted_tail(m, variant, total, view.svl_bytes))
        else:
            lines.append(head + _timed_tail(total, m))
    return lines


def _counted_tail(m: Measurement, variant: Variant, total: CaseWork, svl: int | None) -> str:
    per = total.macs / total.instructions if total.instructions else None
    tail = "" if per is None else f", {per:.2f} per instruction"
    evidence = m.variants[variant].evidence
    sme = evidence.sme_instructions if evidence else None
    if sme and total.sme_macs:
        tail += (
            f"; the {total.sme_macs / 1e6:,.2f} M of its operators that ran SME, "
            f"{total.sme_macs / sme:,.1f} per SME instruction of the inference ({sme:,})"
        )
        if svl and total.ideal_sme_instructions:
            tail += (
                f": {pct(total.ideal_sme_instructions / sme)} of the ideal (one full-tile outer "
                f"product per SME instruction at SVL {svl * 8}: "
                f"{ideal_macs_per_sme(svl, FP32_BITS):,} MACs for FP32 operands)"
            )
    return tail


def _timed_tail(total: CaseWork, m: Measurement) -> str:
    gflops = total.gflops
    if gflops is None:
        return ""
    tail = f", {gflops:,.1f} GFLOP/s over their fastest runs"
    if m.peak is not None and m.peak.gflops:
        tail += f", {pct(gflops / m.peak.gflops)} of the peak {m.peak.gflops:,.0f} GFLOP/s"
    return tail


def _num(value: float | None, spec: str = ",.1f") -> str:
    return "—" if value is None else format(value, spec)


def _share(value: float | None) -> str:
    return "—" if value is None else pct(value)


def operator_table(view: EfficiencyView, rows: int) -> Table:
    """The largest operators by work (at most ``rows``), SME2-on beside SME2-off."""
    pairs = sorted(view.pairs(), key=lambda pair: -_macs(*pair))[:rows]
    if view.counted:
        headers = (
            "operator @delegate call",
            "shape",
            "M MACs",
            "family on",
            "MACs/instr on",
            "MACs/instr off",
            "MACs/SME instr on (≈)",
            "% of ideal",
        )
        body = [
            (
                *_operator_cells(on, off),
                on.family if on else "—",
                _num(on.macs_per_instruction if on else None, ",.2f"),
                _num(off.macs_per_instruction if off else None, ",.2f"),
                _num(on.macs_per_sme if on else None),
                _share(on.ideal_share if on else None),
            )
            for on, off in pairs
        ]
    else:
        headers = (
            "operator @delegate call",
            "shape",
            "M MACs",
            "ms on",
            "GFLOP/s on",
            "% of peak on",
            "ms off",
            "GFLOP/s off",
            "% of peak off",
        )
        body = [
            (
                *_operator_cells(on, off),
                _num(on.ms if on else None, ".3f"),
                _num(on.gflops if on else None),
                _share(on.peak_share if on else None),
                _num(off.ms if off else None, ".3f"),
                _num(off.gflops if off else None),
                _share(off.peak_share if off else None),
            )
            for on, off in pairs
        ]
    return Table(headers, tuple(body))


def _macs(on: OperatorEfficiency | None, off: OperatorEfficiency | None) -> int:
    """The pair's work (0 where unknown)."""
    return next((op.macs for op in (on, off) if op is not None and op.macs is not None), 0)


def _operator_cells(
    on: OperatorEfficiency | None, off: OperatorEfficiency | None
) -> tuple[str, str, str]:
    """The cells every operator table starts with: its name, its shape, its M MACs."""
    macs = _macs(on, off)
    return _name(on, off), _shape(on, off), _num(macs / 1e6 if macs else None, ",.3f")


def _name(on: OperatorEfficiency | None, off: OperatorEfficiency | None) -> str:
    """The operator's event name and its delegate call (``#1`` is per call)."""
    op = on or off
    if op is None:
        return "—"
    return op.name if op.call is None else f"{op.name} @{op.call}"


def _shape(on: OperatorEfficiency | None, off: OperatorEfficiency | None) -> str:
    op = on or off
    if op is None:
        return "—"
    return op.shape if op.macs is not None else "work unknown"


def explanation(view: EfficiencyView) -> str:
    """What the figures are, for report.md."""
    if view.counted:
        return (
            "Multiply-adds (MACs) of each delegated GEMM and convolution operator, from the "
            "program's ETRecord (shapes of its edge program), per instruction the operator "
            "executed; per SME instruction (≈: each function's SME share of its instructions) "
            "against the ideal, one outer product over a full ZA tile per SME instruction "
            "(FP32 FMOPA at SVL 512: 16 × 16 = 256; 16-bit ×2, 8-bit ×4; half as many per halving "
            "of the SVL). The largest operators by work are listed."
        )
    peak = f" Peak: {view.peak_source}." if view.peak_source else ""
    return (
        "Multiply-adds (MACs) of each delegated GEMM and convolution operator, from the "
        "program's ETRecord (shapes of its edge program), and the GFLOP/s (2 per MAC) of its "
        "fastest traced run against the chip's peak." + peak + " The largest operators by work "
        "are listed."
    )


COVERAGE_TITLE = "SME2 coverage"


@dataclass(frozen=True)
class CoverageView:
    """What the SME2 coverage section says: its sentence, the operators outside SME2 (a table;
    None where every one ran SME2) and the SME2 operators that spend most in packing."""

    sentence: str
    outside: Table | None
    packing: tuple[str, ...]


def coverage_view(m: Measurement, rows: int = FULL_ROWS) -> CoverageView | None:
    """SME2-on's coverage of ``m``, at most ``rows`` operators outside SME2 listed (the most work
    first); None where SME2-on did not run on a device with SME2 or its work is unknown."""
    on = m.variants.get(Variant.ON)
    if on is None or not m.device.has_sme2:
        return None
    coverage = variant_coverage(on)
    if coverage is None or coverage.percent is None:
        return None
    how = (
        "by the kernels each operator ran"
        if on.evidence is not None and on.evidence.operator_kernels
        else "by operator names (packed SME operands) and the kernel log"
    )
    unknown = (
        f"; {coverage.unknown} operator(s) of unknown work left out" if coverage.unknown else ""
    )
    sentence = (
        f"SME2-on ran {pct(coverage.percent / 100)} of its GEMM and convolution work in SME2 "
        f"kernels ({coverage.sme2_macs / 1e6:,.2f} of {coverage.macs / 1e6:,.2f} M multiply-adds, "
        f"{how}){unknown}."
    )
    body = [
        (f"{op.name} @{op.call}", op.shape, f"{op.macs / 1e6:,.3f}", op.family)
        for op in coverage.outside[:rows]
    ]
    if len(coverage.outside) > rows:
        body.append((f"… and {len(coverage.outside) - rows} more", "", "", ""))
    table = Table(("outside SME2", "shape", "M MACs", "family"), tuple(body)) if body else None
    return CoverageView(sentence, table, _packing_lines(coverage, rows))


#: SME2 operators named as spending most in packing (the most packing first); the rest counted
PACKING_NAMED = 5


def _packing_lines(coverage: Coverage, rows: int) -> tuple[str, ...]:
    """The SME2 operators whose instructions go mostly to packing their operands: how many, then
    the most packing ones (at most :data:`PACKING_NAMED`, or ``rows`` if fewer)."""
    packing = sorted(
        (op for op in coverage.operators if op.mostly_packing),
        key=lambda o: -(o.packing_share or 0),
    )
    if not packing:
        return ()
    sme2 = sum(1 for op in coverage.operators if op.sme2)
    head = (
        f"{len(packing)} of the {sme2} SME2 operator(s) spend most of their instructions packing "
        "operands rather than in the SME2 matmul:"
    )
    named = min(PACKING_NAMED, rows)
    lines = [
        f"{op.name} @{op.call} ({op.shape}): {op.family}, "
        f"{pct(op.packing_share or 0.0)} of its instructions packing"
        for op in packing[:named]
    ]
    if len(packing) > named:
        lines.append(f"… and {len(packing) - named} more")
    return (head, *lines)
