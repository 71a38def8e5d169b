"""Kernels per operator on qemu-sme2, on real exports, the real aarch64 runner, real qemu.

The functions that executed between the clock reads bounding an operator event are its kernels
(:func:`pytest_sme2.analysis.attribution.operator_kernels`). What must hold for the kernel view to
be believed: every operator's functions add up to exactly its instructions, and SME2 shows where the
operator names say it must — an SME2 kernel in every packed operator with SME2 on, in none off.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

import models  # noqa: F401  (registers the examples)
from pytest_sme2.analysis.categories import is_leaf
from pytest_sme2.analysis.kernel_names import KERNEL_CSV_COLUMNS, Isa, kernel_isa
from pytest_sme2.analysis.kernels import PACKING, kernel_role, kernels_frame, layers_without_sme2
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.analysis.profile import INSTRUCTIONS, profile
from pytest_sme2.devices.base import evidence_request
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import ModelSpec, get_model
from pytest_sme2.judge.baseline import Tolerances
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import judge
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status
from pytest_sme2.report.advice import sme2_path_advice
from pytest_sme2.report.markdown import case_report
from tests.measurements import variant as variant_measurement


@pytest.mark.parametrize(
    ("model", "dtype"), [("toy_cnn", "fp32"), ("toy_cnn", "int8"), ("vit_tiny", "fp32")]
)
def test_each_operators_kernels_sum_to_its_instructions_and_show_sme2_where_packed(
    stored_qemu_device: QemuSme2Device, model: str, dtype: str, tmp_path: Path
) -> None:
    artifact = export_model(get_model(model).for_emulation(), dtype)
    packed_on = 0
    for variant in (Variant.ON, Variant.OFF):
        evidence = stored_qemu_device.evidence(
            evidence_request(artifact.pte, artifact.inputs, tmp_path / variant, variant=variant)
        )
        assert evidence.instruction_trace is not None
        leaves = [
            (e.name, e.end_ns - e.start_ns)
            for e in evidence.instruction_trace.runs[0].events
            if is_leaf(e.name)
        ]
        operators = evidence.operator_kernels
        assert [(op.name, op.instructions) for op in operators] == leaves
        for op in operators:
            assert sum(op.functions.values()) == op.instructions, op.name
            sme2 = [name for name in op.functions if kernel_isa(name) is Isa.SME2]
            packed = parse_op_name(op.name).packed
            if variant is Variant.ON and packed:
                packed_on += 1
                assert sme2, f"{op.name}: no SME2 kernel among {list(op.functions)[:5]}"
            else:
                assert not packed and not sme2, f"{variant} {op.name}: {sme2}"
        # kernels.csv: every kernel that ran in an operator, once, with the kit's columns
        frame = kernels_frame(f"{model}_{dtype}", evidence.kernels)
        assert tuple(frame.columns[: len(KERNEL_CSV_COLUMNS)]) == KERNEL_CSV_COLUMNS
        assert frame["kernel_name"].is_unique
        ran = {name for op in operators for name in op.functions}
        assert set(frame["kernel_name"]) <= ran
        assert (frame["has_sme2"] == 1).any() == (variant is Variant.ON and packed_on > 0)
    assert packed_on > 0, "SME2-on ran no packed operator: nothing was proved"


def test_a_packed_convolution_shows_its_packing_beside_its_matmul(
    stored_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    """The kernel view's point: data movement hidden inside a "Convolution" is counted."""
    artifact = export_model(get_model("toy_cnn").for_emulation(), "fp32")
    evidence = stored_qemu_device.evidence(
        evidence_request(artifact.pte, artifact.inputs, tmp_path, variant=Variant.ON)
    )
    convolutions = [
        op
        for op in evidence.operator_kernels
        if parse_op_name(op.name).packed and parse_op_name(op.name).operator == "Convolution"
    ]
    assert len(convolutions) >= 2
    for op in convolutions:
        packing = sum(n for f, n in op.functions.items() if kernel_role(f) == PACKING)
        assert 0 < packing < op.instructions, op.name


class _Mlp(torch.nn.Module):
    """Two linear layers whose in_features are multiples of 32 (8da4w's weight group)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(128, 256)
        self.down = torch.nn.Linear(256, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _mlp_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(8, 128, generator=torch.Generator().manual_seed(seed)),)


MLP = ModelSpec(
    "gemm_mlp",
    lambda: _Mlp().eval(),
    _mlp_inputs,
    "two linear layers, batch 8",
    dtypes=("int8-dynamic", "8da4w"),
)


def _mlp_measured(device: QemuSme2Device, dtype: str, workdir: Path) -> Measurement:
    """The MLP's SME2-on and -off inferences as qemu-sme2 counts them (profiles in
    instructions), without the timing runs a full measurement adds."""
    artifact = export_model(MLP, dtype)
    variants = {}
    for v in (Variant.ON, Variant.OFF):
        evidence = device.evidence(
            evidence_request(artifact.pte, artifact.inputs, workdir / v, variant=v)
        )
        assert evidence.instruction_trace is not None
        counted = profile(evidence.instruction_trace, unit=INSTRUCTIONS)
        variants[v] = replace(variant_measurement(v, (), (1.0,), evidence), profile=counted)
    return Measurement("gemm_mlp", dtype, 1, device.info(), variants, interleaved=True)


def test_8da4w_layers_run_neon_with_sme2_on_and_fail_require_sme2_kernels(
    stored_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    """ExecuTorch 1.5.1 has no SME2 kernel for QB4W weights: the report says so once, and the
    gate fails with that sentence."""
    m = _mlp_measured(stored_qemu_device, "8da4w", tmp_path)
    on = m.variants[Variant.ON].evidence
    assert on is not None and not on.sme2_kernels
    kinds = {parse_op_name(op.name).key for op in on.operator_kernels}
    assert kinds == {"Fully Connected (NC, QP8, F32, QB4W) GEMM"}
    (group,) = layers_without_sme2(on.operator_kernels, on.instructions or 0)
    assert group.kernels and all(kernel_isa(k) is Isa.NEON for k in group.kernels)
    sentence = group.sentence("8da4w")
    assert "neon_i8mm with SME2 on: no SME2 kernel" in sentence
    verdict = next(
        v
        for v in judge(m, None, Expectations(require_sme2_kernels=True), Tolerances())
        if v.gate == "sme2-kernels"
    )
    assert verdict.status is Status.FAIL and verdict.message.startswith(sentence)
    assert case_report(m, ()).count(sentence) == 1


def test_int8_dynamic_layers_take_the_sme2_path_under_a_qp8_name(
    stored_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    """The name says nothing (``QP8`` on NEON too); the kernels do, and so does the report:
    no "did not take the SME2 path" sentence, and the input packing SME2 left behind."""
    m = _mlp_measured(stored_qemu_device, "int8-dynamic", tmp_path)
    assert not m.variants[Variant.ON].profile.packed_operators
    verdict = next(
        v
        for v in judge(m, None, Expectations(require_sme2_kernels=True), Tolerances())
        if v.gate == "sme2-kernels"
    )
    assert verdict.status is Status.PASS, verdict.message
    said = sme2_path_advice(m)
    assert said and all("runs SME2 kernels, but" in s for s in said), said
    assert "kai_run_lhs_quant_pack_qai8dxp_f32" in said[0]
