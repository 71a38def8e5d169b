"""The ``kernel-family`` spec: each variant's kernel families per operator kind, stored where the
device counts kernels per operator and judged exactly — on the kernels tiny_llama_prefill fp32 runs
on qemu-sme2 (its fully connected layers on KleidiAI's SME2 outer-product GEMM, its one-row layer
on the SME2 multiply-accumulate one), with one layer's family changed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.judge import baseline_file as store
from pytest_sme2.judge.baseline import Tolerances, from_measurement
from pytest_sme2.judge.baseline_update import merge
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import judge
from pytest_sme2.judge.kernel_families import KEY, family_diff
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict
from tests.measurements import PF32_MOPA, counted_measurement, kernel_measurement

TOL = Tolerances()
PF32_MLA = "kai_kernel_matmul_clamp_f32_f32_f32p2vlx1b_1x16vl_sme2_mla"
LHS_PACK = "kai_run_lhs_pack_f32p2vlx1_f32_sme"
XNNPACK_CODE = "[libexecutorch_backend_xnnpack.so]"
FC_PF32, FC_F32 = "Fully Connected (NC, PF32) GEMM", "Fully Connected (NC, F32) GEMM"
BMM_PF32 = "Batch Matrix Multiply (NC, PF32) GEMM"
PREFILL = Path(__file__).parents[2] / "baselines" / "qemu-sme2" / "tiny_llama_prefill-fp32.json"


def prefill(last: tuple[str, str] = (FC_PF32, PF32_MLA)) -> Measurement:
    """A counted inference shaped as tiny_llama_prefill's: three fully connected layers on the
    SME2 outer-product GEMM (after packing their LHS), a batch matmul too, an elementwise add on
    XNNPACK's unnamed NEON code, and a last fully connected layer (``last``: its kind and
    kernel) on the one-row SME2 GEMM; SME2-off runs every one on unnamed NEON code."""
    layers = [(FC_PF32, PF32_MOPA)] * 3 + [(BMM_PF32, PF32_MOPA), ("Add (ND)", XNNPACK_CODE)]
    on = _events([*layers, last])
    off = _events([(FC_F32, XNNPACK_CODE)] * 4 + [("Add (ND)", XNNPACK_CODE)])
    return kernel_measurement("fp32", on, off)


def _events(layers: Sequence[tuple[str, str]]) -> tuple[OperatorKernels, ...]:
    return tuple(
        OperatorKernels(f"{kind} #{i}", 50_000, {LHS_PACK: 30_000, kernel: 20_000})
        for i, (kind, kernel) in enumerate(layers, 1)
    )


def by_gate(verdicts: Sequence[Verdict]) -> dict[str, Verdict]:
    return {v.gate: v for v in verdicts}


def test_the_families_are_stored_per_operator_kind_of_each_variant() -> None:
    stored = from_measurement(prefill(), TOL)
    assert stored.variants["sme2-on"].operator_kernel_families == {
        "Add (ND)": {"unnamed": 1},
        BMM_PF32: {"SME2 MOPA": 1},
        FC_PF32: {"SME2 MOPA": 3, "SME2 MLA": 1},
    }
    assert stored.variants["sme2-off"].operator_kernel_families == {
        "Add (ND)": {"unnamed": 1},
        FC_F32: {"unnamed": 4},
    }


def test_an_unchanged_selection_passes_and_a_layer_moved_to_the_other_sme2_kernel_fails() -> None:
    stored = from_measurement(prefill(), TOL)
    unchanged = by_gate(judge(prefill(), stored, Expectations(), TOL))
    assert unchanged["kernel-family[sme2-on]"].status is Status.PASS
    assert unchanged["kernel-family[sme2-off]"].status is Status.PASS
    # the one-row layer now takes the outer-product GEMM: the same operators (the structure
    # says only that the case runs one SME2 kernel fewer), one of them in another family
    moved = by_gate(judge(prefill((FC_PF32, PF32_MOPA)), stored, Expectations(), TOL))
    verdict = moved["kernel-family[sme2-on]"]
    assert verdict.status is Status.FAIL
    assert "kernel families of toy[fp32] on" in verdict.message
    assert verdict.details == (f"{FC_F32}: SME2 MOPA ×3 · SME2 MLA ×1 → SME2 MOPA ×4",)
    assert moved["kernel-family[sme2-off]"].status is Status.PASS


def test_a_layer_fallen_to_neon_fails_naming_the_kind_and_both_families() -> None:
    """The layer is renamed (``PF32`` → ``F32``) and still compared with its kind."""
    stored = from_measurement(prefill(), TOL)
    neon = by_gate(judge(prefill((FC_F32, XNNPACK_CODE)), stored, Expectations(), TOL))
    assert neon["kernel-family[sme2-on]"].details == (
        f"{FC_F32}: SME2 MOPA ×3 · SME2 MLA ×1 → SME2 MOPA ×3 · unnamed ×1",
    )
    # and an update records the new families, saying what changed
    kept, changes = merge(stored, from_measurement(prefill((FC_F32, XNNPACK_CODE)), TOL), TOL)
    assert f"sme2-on {neon['kernel-family[sme2-on]'].details[0]}" in changes
    assert kept.variants["sme2-on"].operator_kernel_families[FC_F32] == {"unnamed": 1}


def test_a_baseline_without_families_is_not_judged_and_an_update_records_them() -> None:
    old = from_measurement(counted_measurement(), TOL)
    assert old.variants["sme2-on"].operator_kernel_families == {}
    verdict = by_gate(judge(prefill(), old, Expectations(), TOL))["kernel-family[sme2-on]"]
    assert verdict.status is Status.SKIP
    assert verdict.message.endswith(
        "not judged: the baseline has no kernel families per operator; "
        "--sme2-update-baselines records them"
    )
    _, changes = merge(old, from_measurement(prefill(), TOL), TOL)
    assert "sme2-on kernel families per operator recorded" in changes
    # a device that counts no kernels per operator: nothing to judge, nothing stored
    uncounted = judge(counted_measurement(), old, Expectations(), TOL)
    assert not any(v.gate.startswith("kernel-family") for v in uncounted)


def test_the_committed_prefill_baseline_fails_an_edit_of_one_layers_family() -> None:
    """tiny_llama_prefill fp32 as qemu-sme2 recorded it: 14 fully connected layers on the SME2
    outer-product GEMM, one (a single row) on the SME2 MLA one; that layer moved to NEON fails,
    an unchanged copy passes."""
    stored = store.load(PREFILL)
    assert stored is not None
    on = stored.variants["sme2-on"]
    assert on.operator_kernel_families[FC_PF32] == {"SME2 MOPA": 14, "SME2 MLA": 1}
    assert family_diff(on, replace(on)) == []
    edited = {**on.operator_kernel_families, FC_PF32: {"SME2 MOPA": 14, "NEON": 1}}
    assert family_diff(on, replace(on, operator_kernel_families=edited)) == [
        f"{FC_F32}: SME2 MOPA ×14 · SME2 MLA ×1 → SME2 MOPA ×14 · NEON ×1"
    ]


@pytest.mark.parametrize("families", [{"X": {"SME3": 1}}, {"X": {"NEON": 0}}, {"X": ["NEON"]}])
def test_a_stored_family_outside_the_schema_is_an_invalid_baseline(tmp_path, families) -> None:
    path = tmp_path / "b.json"
    path.write_text(store.to_json(from_measurement(prefill(), TOL)))
    doc = json.loads(path.read_text())
    assert doc["variants"]["sme2-on"][KEY][FC_PF32] == {"SME2 MLA": 1, "SME2 MOPA": 3}
    doc["variants"]["sme2-on"][KEY] = families
    path.write_text(json.dumps(doc))
    with pytest.raises(store.InvalidBaseline, match="not a valid baseline"):
        store.load(path)
