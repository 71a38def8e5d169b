"""What a report says about SME2 itself: the instructions of the counted inference, the kernels
that executed in each top operator, and what the traces prove (packed operator names, executed
SME2 kernels) and cannot.

Apart from :mod:`pytest_sme2.report.content` because it reads the device's evidence
(``Sme2Evidence``) where content reads the profiles; both render through the same ``Table``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_sme2.analysis.kernel_families import by_unpacked_kind, families_by_kind, families_text
from pytest_sme2.analysis.kernel_names import readable
from pytest_sme2.analysis.kernels import ROLES, kernel_role, kernels_by_kind
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.report.format import Table, ordered_variants, pct


def instruction_source(m: Measurement) -> str:
    """Where the instruction counts come from, e.g. "qemu exec log, one steady-state inference"."""
    sources = {vm.evidence.source for vm in m.variants.values() if vm.evidence}
    return ", ".join(sorted(sources)) + ", one steady-state inference"


def instruction_table(m: Measurement) -> Table:
    """Guest instructions of one steady-state inference per variant (E2E, and how many were SME),
    and the SME2 kernels it executed: where time means nothing, what the inference did."""
    rows = []
    for variant in ordered_variants(m):
        evidence = m.variants[variant].evidence
        total = evidence.instructions if evidence else None
        sme = evidence.sme_instructions if evidence else None
        rows.append(
            (
                str(variant),
                "—" if total is None else f"{total:,}",
                "—" if sme is None else f"{sme:,}",
                "—" if not sme or not total else pct(sme / total),
                str(len(evidence.sme2_kernels)) if evidence else "—",
            )
        )
    headers = ("variant", "instructions/inference", "SME instructions", "SME share", "SME2 kernels")
    return Table(headers, tuple(rows))


#: operators the kernel view shows (the headline variant's largest), and kernels per operator
KERNEL_VIEW_OPERATORS = 5
KERNEL_VIEW_KERNELS = 4
KERNEL_VIEW_TITLE = "Kernels of the top operators (share of each operator's instructions)"


def kernel_table(m: Measurement) -> Table | None:
    """The kernel view: for the top operators (of the headline variant, matched across
    variants by ``OpName.unpacked_key``), the functions that executed in them with their share of
    the operator's instructions, SME2-off beside SME2-on ("—": it did not run there); a first
    row per operator splits it by role (:data:`pytest_sme2.analysis.kernels.ROLES`), a second
    says the kernel family of its operators (:mod:`pytest_sme2.analysis.kernel_families`, what
    the ``kernel-family`` gate judges). None where no variant has kernels per operator (only
    qemu-sme2 counts them)."""
    kinds: dict[Variant, dict[str, dict[str, int]]] = {}
    families: dict[Variant, dict[str, dict[str, int]]] = {}
    for variant in ordered_variants(m):
        evidence = m.variants[variant].evidence
        if evidence is not None and evidence.operator_kernels:
            kinds[variant] = {
                parse_op_name(kind).unpacked_key: functions
                for kind, functions in kernels_by_kind(evidence.operator_kernels).items()
            }
            families[variant] = by_unpacked_kind(families_by_kind(evidence.operator_kernels))
    if not kinds:
        return None
    shown = list(kinds)
    rows = []
    head = m.variants[m.headline].profile
    for op in head.top_operators(KERNEL_VIEW_OPERATORS):
        key = parse_op_name(op.name).unpacked_key
        per_variant = [kinds[v].get(key, {}) for v in shown]
        if not any(per_variant):
            continue
        rows.append(
            (
                op.name,
                " · ".join(ROLES),
                "",
                *(
                    " · ".join(
                        _share_of(f, [n for n in f if kernel_role(n) == role]) for role in ROLES
                    )
                    if f
                    else "—"
                    for f in per_variant
                ),
            )
        )
        if any(key in families[v] for v in shown):
            rows.append(
                ("", "kernel family", "", *(families_text(families[v].get(key, {})) for v in shown))
            )
        rows += _kernel_rows(per_variant)
    headers = ("operator", "kernel", "role", *(f"{v} share of operator" for v in shown))
    return Table(headers, tuple(rows))


def _kernel_rows(per_variant: Sequence[Mapping[str, int]]) -> list[tuple[str, ...]]:
    """One operator's largest functions in each variant, largest first, with their shares."""
    ranked: dict[str, float] = {}
    for functions in per_variant:
        total = sum(functions.values())
        for name, count in list(functions.items())[:KERNEL_VIEW_KERNELS]:
            ranked[name] = max(ranked.get(name, 0.0), count / total)
    return [
        (
            "",
            readable(name),
            kernel_role(name),
            *(_share_of(f, [name]) if name in f else "—" for f in per_variant),
        )
        for name in sorted(ranked, key=lambda n: -ranked[n])
    ]


def _share_of(functions: Mapping[str, int], names: Sequence[str]) -> str:
    """``names``' part of all ``functions``' instructions, "—" for an operator without them."""
    total = sum(functions.values())
    return pct(sum(functions.get(n, 0) for n in names) / total) if total else "—"


def evidence_lines(m: Measurement) -> list[str]:
    """What the traces prove about SME2: packed operator names per variant, and what they cannot;
    and, where the device shows them, the executed kernels and instruction counts the gates
    judged on."""
    lines = []
    for variant in ordered_variants(m):
        packed = m.variants[variant].profile.packed_operators
        lines.append(
            f"{variant}: "
            + (
                f"{len(packed)} packed SME operator kind(s): {', '.join(packed)}"
                if packed
                else "no packed SME operator (PF32/PF16/PQS8 …) in the trace"
            )
        )
    lines += _executed_lines(m)
    if not m.device.has_sme2:
        lines.append(
            f"{m.device.name} has no SME2 "
            f"({m.device.limits.get('sme2', 'not reported by the CPU')}): "
            "no SME2 kernel can run; packed names in the trace would mean a broken variant."
        )
    elif Variant.ON in m.variants:
        on_ran, off_ran = _took_sme(m, Variant.ON), _took_sme(m, Variant.OFF)
        if on_ran and not off_ran:
            lines.append(
                "SME2 kernels ran with SME2 on and none with SME2 off: "
                "the variants differ as intended."
            )
        elif not on_ran:
            lines.append(
                "With SME2 on no operator took the SME2 path (dtype or operators not SME-capable)."
            )
        else:
            lines.append("SME also ran with SME2 off: the off variant is not SME-free.")
    if not any(vm.evidence for vm in m.variants.values()):
        lines.append(
            "Kernel names: release builds of XNNPACK log none; operator datatypes are the "
            "evidence. Dynamic int8 (QP8) names look alike with and without SME."
        )
    return lines


def _took_sme(m: Measurement, variant: Variant) -> bool:
    """Whether ``variant`` ran SME: by its executed kernels where the device shows them (a
    dynamic int8 ``QP8`` GEMM runs SME2 under an unpacked name), else by packed operator names."""
    if variant not in m.variants:
        return False
    vm = m.variants[variant]
    if vm.evidence is not None and vm.evidence.operator_kernels:
        return bool(vm.evidence.sme2_kernels or vm.evidence.sme_kernels)
    return bool(vm.profile.packed_operators)


def _executed_lines(m: Measurement) -> list[str]:
    """Per variant with device evidence: the SME2 (and SME1-only) kernels that executed and the
    instructions of one inference; then the instruction ratio off ÷ on."""
    lines = []
    for variant in ordered_variants(m):
        evidence = m.variants[variant].evidence
        if evidence is None:
            continue
        kernels = evidence.sme2_kernels
        executed = (
            f"{len(kernels)} SME2 kernel(s) executed: {', '.join(kernels)}"
            if kernels
            else "no SME2 kernel executed"
        )
        if evidence.sme_kernels:
            executed += f"; SME1-only kernel(s): {', '.join(evidence.sme_kernels)}"
        if evidence.instructions is not None:
            executed += f"; {evidence.instructions:,} instructions/inference"
            if evidence.sme_instructions is not None:
                executed += f", {evidence.sme_instructions:,} of them SME"
        lines.append(f"{variant} ({evidence.source}): {executed}")
    if m.instruction_ratio is not None:
        lines.append(f"Instruction ratio {m.instruction_ratio:.2f}× (instructions off ÷ on).")
    stored = sorted({vm.evidence.stored_count_at for vm in m.variants.values() if vm.evidence})
    stored = [when for when in stored if when]
    if stored:
        lines.append(
            f"Counts read back from the run(s) counted {', '.join(stored)}: the same program, "
            "inputs, runner, wheel, guest libraries and qemu count the same to the instruction "
            "(--sme2-recount counts again)."
        )
    return lines
