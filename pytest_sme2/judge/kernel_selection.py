"""The SME2 kernels of each operator kind with SME2 on, as one spec: where the device counts kernels
per operator (qemu-sme2) they are stored in the variant's portable part and judged against the
baseline's (``kernel-selection``), so a library update that replaces an SME2 kernel by another, or
by a NEON one, is reported by name — and an operator kind left with no SME2 kernel fails under
``require_sme2_kernels``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_sme2.analysis.kernels import sme2_kernels_by_kind
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.judge.baseline_model import VariantBaseline
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.structure import portable_name
from pytest_sme2.judge.wording import RECORD_IT, case_name
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement, VariantMeasurement
from pytest_sme2.records.verdict import Status, Verdict


def operator_sme2_kernels(vm: VariantMeasurement) -> dict[str, tuple[str, ...]]:
    """Operator kind (portable name) → the SME2 kernels that ran in it, from the variant's
    kernels per operator; {} where the device does not count them."""
    if vm.evidence is None or not vm.evidence.operator_kernels:
        return {}
    kinds: dict[str, set[str]] = {}
    for kind, names in sme2_kernels_by_kind(vm.evidence.operator_kernels).items():
        kinds.setdefault(portable_name(kind), set()).update(names)
    return {kind: tuple(sorted(names)) for kind, names in sorted(kinds.items())}


def kernel_selection_diff(
    stored: VariantBaseline, now: VariantBaseline
) -> tuple[list[str], list[str]]:
    """How the SME2 kernels per operator kind changed, one line per kind naming the kernels
    (kinds matched without their packing, ``PF32`` = ``F32``: a kind that fell back to NEON is
    renamed); and the stored kinds that now run no SME2 kernel at all although the model still
    has them (a kind the user removed from the model is reported, not counted as gone). ([], [])
    where ``stored`` has none (a baseline written before they were recorded)."""
    if not stored.operator_sme2_kernels:
        return [], []

    def unpacked(kinds: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, tuple[str, ...]]]:
        return {parse_op_name(kind).unpacked_key: (kind, names) for kind, names in kinds.items()}

    old, new = unpacked(stored.operator_sme2_kernels), unpacked(now.operator_sme2_kernels)
    present = {parse_op_name(kind).unpacked_key for kind in now.operators}
    lines, gone = [], []
    for key in sorted({*old, *new}):
        kind, before = old[key] if key in old else (new[key][0], ())
        after = new[key][1] if key in new else ()
        if before == after:
            continue
        removed = [n for n in before if n not in after]
        added = [n for n in after if n not in before]
        if not after and key not in present:  # the user's model no longer has this kind
            lines.append(f"{kind}: no longer in the model (it ran {', '.join(removed)})")
        elif not after:
            gone.append(kind)
            lines.append(f"{kind}: SME2 kernel {', '.join(removed)} no longer runs, none does")
        elif not before:
            lines.append(f"{kind}: now runs SME2 kernel {', '.join(added)}")
        else:
            lines.append(
                f"{kind}: SME2 kernel {', '.join(removed) or '—'} → {', '.join(added) or '—'}"
            )
    return lines, gone


class KernelSelection:
    """The spec of the SME2 kernels per operator kind (see the module's docstring)."""

    name = "kernel-selection"
    schema: Mapping[str, Any] = {
        "operator_sme2_kernels": {
            "description": "operator kind → the SME2 kernels that ran in it (qemu-sme2)",
            "type": "object",
            "propertyNames": {"minLength": 1},
            "additionalProperties": {"$ref": "#/$defs/names"},
        }
    }
    required = ()

    def measured(self, m: Measurement, vm: VariantMeasurement, counts: bool) -> dict[str, Any]:
        return {"operator_sme2_kernels": operator_sme2_kernels(vm)}

    def to_json(self, part: VariantBaseline) -> dict[str, Any]:
        """Only where counted: the baselines of devices that count none keep their bytes."""
        kernels = part.operator_sme2_kernels
        return (
            {"operator_sme2_kernels": {k: list(v) for k, v in kernels.items()}} if kernels else {}
        )

    def from_json(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        kernels = doc.get("operator_sme2_kernels", {})
        return {"operator_sme2_kernels": {kind: tuple(names) for kind, names in kernels.items()}}

    def merge(
        self, old: VariantBaseline, new: VariantBaseline, tol: Tolerances
    ) -> tuple[dict[str, Any], list[str]]:
        """The new selection, always (it is exact), and each kind whose kernels changed."""
        lines = []
        if not old.operator_sme2_kernels and new.operator_sme2_kernels:
            lines.append("SME2 kernels per operator kind recorded")
        lines += kernel_selection_diff(old, new)[0]
        return {"operator_sme2_kernels": new.operator_sme2_kernels}, lines

    def check(self, judging: Judging) -> list[Verdict]:
        """Judged where both the baseline and the measurement have kernels per operator."""
        if judging.stored is None:
            return []
        m = judging.measurement
        on, stored = m.variants.get(Variant.ON), judging.stored.variants.get(str(Variant.ON))
        evidence = on.evidence if on is not None else None
        if stored is None or not stored.operator_sme2_kernels:
            return []  # a baseline written before kernels per operator were recorded
        if evidence is None or not evidence.operator_kernels:
            return []
        lines, gone = kernel_selection_diff(stored, judging.now.variants[str(Variant.ON)])
        if gone and judging.expectations.require_sme2_kernels:
            message = (
                f"SME2 kernels gone from {len(gone)} operator kind(s) of {case_name(m)}: "
                f"{', '.join(gone)} (require_sme2_kernels)"
            )
            return [Verdict(self.name, Status.FAIL, message, tuple(lines))]
        if lines:
            message = (
                f"the SME2 kernel selection of {case_name(m)} changed from the baseline: "
                + RECORD_IT
            )
            return [Verdict(self.name, Status.PASS, message, tuple(lines))]
        kinds = len(stored.operator_sme2_kernels)
        message = f"{kinds} operator kind(s) run the baseline's SME2 kernels"
        return [Verdict(self.name, Status.PASS, message)]


KERNEL_SELECTION = KernelSelection()
