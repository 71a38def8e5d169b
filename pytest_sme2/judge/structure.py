"""The operator structure of a variant — operator kinds and counts per run, the operators packed for
SME, the SME2 kernels that executed — as one spec: measured, stored in the variant's portable part,
judged exactly (``structure[variant]``, with a compact diff) and replaced by an update, which lists
what changed.

Operator kinds are stored by their portable name (``ops.portable_key``), so CPUs that spell dynamic
int8 differently agree on one baseline.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.analysis.profile import Profile
from pytest_sme2.judge.baseline_model import VariantBaseline
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.moves import Tolerances, stable
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.measurement import Measurement, VariantMeasurement
from pytest_sme2.records.verdict import Status, Verdict


def portable_name(operator: str) -> str:
    """An operator kind as every machine of the device kind names it (``ops.portable_key``)."""
    return parse_op_name(operator).portable_key


def operator_structure(prof: Profile) -> dict[str, float]:
    """Operator kind (portable name) → occurrences per run: the structure a baseline stores."""
    counts: Counter[str] = Counter()
    for op in prof.operators:
        counts[portable_name(op.name)] += op.count
    return {name: stable(count / prof.runs) for name, count in counts.items()}


def operator_diff(old: Mapping[str, float], new: Mapping[str, float]) -> list[str]:
    """Compact lines: ``+ name ×n/run``, ``− name ×n/run``, ``name ×a → ×b/run``."""
    lines = []
    for name in sorted({*old, *new}):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        if a is None:
            lines.append(f"+ {name} ×{b:g}/run")
        elif b is None:
            lines.append(f"− {name} ×{a:g}/run")
        else:
            lines.append(f"{name} ×{a:g} → ×{b:g}/run")
    return lines


def structure_diff(stored: VariantBaseline, now: VariantBaseline) -> list[str]:
    """What changed in a variant's portable structure: operator kinds and counts (stored names
    made portable, so CPUs that spell dynamic int8 differently agree), packed operators and
    executed SME2 kernels, compared exactly; [] when nothing did."""
    diff = operator_diff(
        {portable_name(k): stable(v) for k, v in stored.operators.items()}, now.operators
    )
    if tuple(stored.packed_operators) != tuple(now.packed_operators):
        diff.append(
            f"packed operators {list(stored.packed_operators)} → {list(now.packed_operators)}"
        )
    if tuple(stored.sme2_kernels) != tuple(now.sme2_kernels):
        diff.append(f"SME2 kernels {list(stored.sme2_kernels)} → {list(now.sme2_kernels)}")
    return diff


class Structure:
    """The spec of a variant's operator structure (see the module's docstring)."""

    name = "structure"
    schema: Mapping[str, Any] = {
        "operators": {
            "description": "operator kind → occurrences per run",
            "type": "object",
            "propertyNames": {"minLength": 1},
            "additionalProperties": {"$ref": "#/$defs/positive"},
        },
        "packed_operators": {"$ref": "#/$defs/names"},
        "sme2_kernels": {"$ref": "#/$defs/names"},
    }
    required = ("operators", "packed_operators")

    def measured(self, m: Measurement, vm: VariantMeasurement, counts: bool) -> dict[str, Any]:
        return {
            "operators": operator_structure(vm.profile),
            "packed_operators": vm.profile.packed_operators,
            "sme2_kernels": vm.evidence.sme2_kernels if vm.evidence else (),
        }

    def to_json(self, part: VariantBaseline) -> dict[str, Any]:
        return {
            "operators": dict(part.operators),
            "packed_operators": list(part.packed_operators),
            "sme2_kernels": list(part.sme2_kernels),
        }

    def from_json(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "operators": dict(doc["operators"]),
            "packed_operators": tuple(doc["packed_operators"]),
            "sme2_kernels": tuple(doc.get("sme2_kernels", ())),
        }

    def merge(
        self, old: VariantBaseline, new: VariantBaseline, tol: Tolerances
    ) -> tuple[dict[str, Any], list[str]]:
        """The new structure, always (it is exact), and each difference from the stored one."""
        fields = {f: getattr(new, f) for f in ("operators", "packed_operators", "sme2_kernels")}
        return fields, structure_diff(old, new)

    def check(self, judging: Judging) -> list[Verdict]:
        if judging.stored is None:
            return []
        m = judging.measurement
        verdicts = []
        for variant in m.variants:
            gate = f"structure[{variant}]"
            stored = judging.stored.variants.get(str(variant))
            if stored is None:
                message = f"the baseline has no {variant} variant for {case_name(m)}; update it"
                verdicts.append(Verdict(gate, Status.FAIL, message))
                continue
            measured = judging.now.variants[str(variant)]
            diff = structure_diff(stored, measured)
            if diff:
                message = (
                    f"operator structure of {case_name(m)} ({variant}) changed from the baseline"
                )
                verdicts.append(Verdict(gate, Status.FAIL, message, tuple(diff)))
            else:
                message = f"{len(measured.operators)} operator kinds as in the baseline"
                verdicts.append(Verdict(gate, Status.PASS, message))
        return verdicts


STRUCTURE = Structure()
