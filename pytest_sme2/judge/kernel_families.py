"""The kernel family of each operator kind, as one spec: where the device counts kernels per
operator (qemu-sme2), how many of each XNNPACK operator kind's operators ran each family of
compute kernel (SME2 MOPA, SME2 MLA, NEON…; :mod:`pytest_sme2.analysis.kernel_families`) is
stored in each variant's portable part and judged exactly against the baseline's
(``kernel-family[<variant>]``): a library update that moves a layer from SME2's outer products to
its one-row kernel, or to NEON, fails naming the kind and both families.

Beside ``kernel-selection``, not in it: that spec names SME2 kernels and reports their changes
(it fails only an operator kind left without SME2 under ``require_sme2_kernels``), where a family
change moves a layer's cost by a factor whatever the marker says, so it fails, as the structure
does. Judged per kind, not per layer: the trace gives no operator's shape (its rows, M), nor a
name that stays put when the graph changes, so the count of a kind's operators per family is what
can be compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_sme2.analysis.kernel_families import (
    KernelFamily,
    by_unpacked_kind,
    families_by_kind,
    families_text,
)
from pytest_sme2.judge.baseline_model import VariantBaseline
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.structure import portable_name
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.measurement import Measurement, VariantMeasurement
from pytest_sme2.records.verdict import Status, Verdict

KEY = "operator_kernel_families"


def operator_families(vm: VariantMeasurement) -> dict[str, dict[str, int]]:
    """Operator kind (portable name) → kernel family → its operators in the counted inference;
    {} where the device does not count kernels per operator."""
    if vm.evidence is None or not vm.evidence.operator_kernels:
        return {}
    kinds: dict[str, dict[str, int]] = {}
    for kind, families in families_by_kind(vm.evidence.operator_kernels).items():
        into = kinds.setdefault(portable_name(kind), {})
        for family, count in families.items():
            into[family] = into.get(family, 0) + count
    return dict(sorted(kinds.items()))


def family_diff(stored: VariantBaseline, now: VariantBaseline) -> list[str]:
    """One line per operator kind whose families changed, ``<kind>: <before> → <after>`` (kinds
    matched without their packing, ``PF32`` = ``F32``, so a layer that fell to NEON is the same
    kind); a kind on one side only is the structure's to report. [] where nothing changed."""
    old = by_unpacked_kind(stored.operator_kernel_families)
    new = by_unpacked_kind(now.operator_kernel_families)
    return [
        f"{kind}: {families_text(old[kind])} → {families_text(new[kind])}"
        for kind in sorted(old.keys() & new.keys())
        if old[kind] != new[kind]
    ]


class KernelFamilies:
    """The spec of the kernel families per operator kind (see the module's docstring)."""

    name = "kernel-family"
    schema: Mapping[str, Any] = {
        KEY: {
            "description": "operator kind → kernel family → its operators per inference "
            "(qemu-sme2)",
            "type": "object",
            "propertyNames": {"minLength": 1},
            "additionalProperties": {
                "type": "object",
                "propertyNames": {"enum": [str(family) for family in KernelFamily]},
                "additionalProperties": {"$ref": "#/$defs/count"},
            },
        }
    }
    required = ()

    def measured(self, m: Measurement, vm: VariantMeasurement, counts: bool) -> dict[str, Any]:
        return {KEY: operator_families(vm)}

    def to_json(self, part: VariantBaseline) -> dict[str, Any]:
        """Only where counted: the baselines of devices that count none keep their bytes."""
        families = part.operator_kernel_families
        return {KEY: {kind: dict(f) for kind, f in families.items()}} if families else {}

    def from_json(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        return {KEY: {kind: dict(families) for kind, families in doc.get(KEY, {}).items()}}

    def merge(
        self, old: VariantBaseline, new: VariantBaseline, tol: Tolerances
    ) -> tuple[dict[str, Any], list[str]]:
        """The new families, always (they are exact), and each kind whose families changed."""
        if not old.operator_kernel_families and new.operator_kernel_families:
            return {KEY: new.operator_kernel_families}, ["kernel families per operator recorded"]
        return {KEY: new.operator_kernel_families}, family_diff(old, new)

    def check(self, judging: Judging) -> list[Verdict]:
        """Per variant, where the measurement has families; "not judged" where the baseline was
        written before they were recorded (it passes, and an update records them)."""
        if judging.stored is None:
            return []
        m = judging.measurement
        verdicts = []
        for variant in m.variants:
            gate = f"{self.name}[{variant}]"
            now = judging.now.variants[str(variant)]
            stored = judging.stored.variants.get(str(variant))
            if not now.operator_kernel_families or stored is None:
                continue  # no kernels per operator counted; a missing variant is structure's
            if not stored.operator_kernel_families:
                message = (
                    f"kernel families of {case_name(m)} ({variant}) not judged: the baseline "
                    "has no kernel families per operator; --sme2-update-baselines records them"
                )
                verdicts.append(Verdict(gate, Status.SKIP, message))
                continue
            diff = family_diff(stored, now)
            if diff:
                message = f"kernel families of {case_name(m)} ({variant}) changed from the baseline"
                verdicts.append(Verdict(gate, Status.FAIL, message, tuple(diff)))
            else:
                kinds = len(stored.operator_kernel_families)
                message = f"{kinds} operator kind(s) run the baseline's kernel families"
                verdicts.append(Verdict(gate, Status.PASS, message))
        return verdicts


KERNEL_FAMILIES = KernelFamilies()
