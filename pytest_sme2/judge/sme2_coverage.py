"""SME2 coverage as one spec: the share of SME2-on's GEMM and convolution multiply-adds run in
SME2 kernels (:mod:`pytest_sme2.analysis.coverage`), stored in SME2-on's portable part with the
operators that ran them, and judged two ways (``sme2-coverage[sme2-on]``):

* against the marker's floor, ``min_sme2_coverage=`` (percent): a case under it fails naming the
  operators outside SME2, the most work first;
* against the baseline: a fall of more than ``sme2_coverage_tolerance`` points (1) fails naming
  the operators that left SME2 — where the operator kinds and counts stay the same (the
  structure passes) and SME2 kernels still run (the SME2 kernel gate passes), this is what moves.

Where the device counts kernels per operator (qemu-sme2) an operator ran SME2 if its largest
compute kernel is SME2's; elsewhere by its name (packed SME operands) and the kernel log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_sme2.analysis.coverage import Coverage, counted_coverage, named_coverage
from pytest_sme2.judge.baseline_model import StoredCoverage, VariantBaseline
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement, VariantMeasurement
from pytest_sme2.records.verdict import Status, Verdict

KEY = "sme2_coverage"
#: operators a failure names
NAMED = 6


def variant_coverage(vm: VariantMeasurement) -> Coverage | None:
    """``vm``'s SME2 coverage; None where its work is unknown (no ETRecord with shapes)."""
    if not vm.work:
        return None
    evidence = vm.evidence
    if evidence is not None and evidence.operator_kernels:
        return counted_coverage(vm.work, evidence.operator_kernels)
    return named_coverage(vm.work, evidence.sme2_kernels if evidence is not None else ())


def _stored(coverage: Coverage | None) -> StoredCoverage | None:
    if coverage is None or coverage.percent is None:
        return None
    return StoredCoverage(round(coverage.percent, 1), coverage.sme2_labels())


def _names(labels: list[str]) -> str:
    shown = ", ".join(labels[:NAMED])
    return shown + (f" and {len(labels) - NAMED} more" if len(labels) > NAMED else "")


class Sme2Coverage:
    """The spec of SME2 coverage (see the module's docstring)."""

    name = "sme2-coverage"
    schema: Mapping[str, Any] = {
        KEY: {
            "description": "SME2-on's share (%) of the GEMM and convolution multiply-adds run "
            "in SME2 kernels, and the operators that ran them",
            "type": "object",
            "required": ["percent", "sme2_operators"],
            "additionalProperties": False,
            "properties": {
                "percent": {"type": "number", "minimum": 0, "maximum": 100},
                "sme2_operators": {"type": "array", "items": {"type": "string"}},
            },
        }
    }
    required = ()

    def measured(self, m: Measurement, vm: VariantMeasurement, counts: bool) -> dict[str, Any]:
        """SME2-on's only, on a device with SME2: SME2-off's is none by construction."""
        if vm.variant is not Variant.ON or not m.device.has_sme2:
            return {}
        return {KEY: _stored(variant_coverage(vm))}

    def to_json(self, part: VariantBaseline) -> dict[str, Any]:
        """Only where known: the baselines of cases without work keep their bytes."""
        stored = part.sme2_coverage
        if stored is None:
            return {}
        return {KEY: {"percent": stored.percent, "sme2_operators": list(stored.sme2_operators)}}

    def from_json(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        found = doc.get(KEY)
        if found is None:
            return {}
        return {KEY: StoredCoverage(found["percent"], tuple(found["sme2_operators"]))}

    def merge(
        self, old: VariantBaseline, new: VariantBaseline, tol: Tolerances
    ) -> tuple[dict[str, Any], list[str]]:
        """The new coverage, always (it is exact where counted), and a line where it changed."""
        before, after = old.sme2_coverage, new.sme2_coverage
        if after is None:
            return {KEY: before}, []
        if before is None:
            return {KEY: after}, [f"SME2 coverage recorded ({after.percent:g} %)"]
        if before == after:
            return {KEY: after}, []
        return {KEY: after}, [f"SME2 coverage {before.percent:g} % → {after.percent:g} %"]

    def check(self, judging: Judging) -> list[Verdict]:
        m = judging.measurement
        on = m.variants.get(Variant.ON)
        if on is None or not m.device.has_sme2:
            return []
        coverage = variant_coverage(on)
        gate = f"{self.name}[{Variant.ON}]"
        if coverage is None or coverage.percent is None:
            return []
        verdicts = []
        floor = judging.expectations.min_sme2_coverage
        if floor is not None:
            verdicts.append(_against_floor(m, coverage, floor, gate))
        stored = judging.stored.variants.get(str(Variant.ON)) if judging.stored else None
        if stored is not None:
            tolerance = judging.expectations.sme2_coverage_tolerance
            verdicts.append(_against_baseline(m, coverage, stored.sme2_coverage, tolerance, gate))
        return verdicts


def _against_floor(m: Measurement, coverage: Coverage, floor: float, gate: str) -> Verdict:
    percent = coverage.percent or 0.0
    if percent >= floor:
        message = f"SME2 coverage {percent:.1f} % ≥ the floor {floor:g} %"
        return Verdict(gate, Status.PASS, message)
    outside = [f"{op.label}: {op.family}" for op in coverage.outside]
    message = (
        f"SME2 coverage of {case_name(m)} is {percent:.1f} % of its GEMM and convolution work, "
        f"under the floor {floor:g} %; outside SME2: {_names(outside)}"
    )
    return Verdict(gate, Status.FAIL, message, tuple(outside))


def _against_baseline(
    m: Measurement,
    coverage: Coverage,
    stored: StoredCoverage | None,
    tolerance: float,
    gate: str,
) -> Verdict:
    percent = coverage.percent or 0.0
    if stored is None:
        message = (
            f"SME2 coverage of {case_name(m)} not judged against the baseline: it has none; "
            "--sme2-update-baselines records it"
        )
        return Verdict(gate, Status.SKIP, message)
    fall = stored.percent - percent
    if fall <= tolerance:
        message = (
            f"SME2 coverage {percent:.1f} % (baseline {stored.percent:g} %, tolerance "
            f"{tolerance:g} points)"
        )
        return Verdict(gate, Status.PASS, message)
    now = {op.label: op for op in coverage.operators}
    left = [
        f"{label}: now {now[label].family}" if label in now else label
        for label in stored.sme2_operators
        if label not in now or not now[label].sme2
    ]
    message = (
        f"SME2 coverage of {case_name(m)} fell {fall:.1f} points, {stored.percent:g} % → "
        f"{percent:.1f} % (tolerance {tolerance:g}); left SME2: {_names(left) or 'none named'}"
    )
    return Verdict(gate, Status.FAIL, message, tuple(left))


SME2_COVERAGE = Sme2Coverage()
