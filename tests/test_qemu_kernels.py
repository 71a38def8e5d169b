"""Kernels per operator on qemu-sme2, on real exports, the real aarch64 runner, real qemu.

The functions that executed between the clock reads bounding an operator event are its kernels
(:func:`pytest_sme2.attribution.operator_kernels`). What must hold for the kernel view to be
believed: every operator's functions add up to exactly its instructions, and SME2 shows where the
operator names say it must — an SME2 kernel in every packed operator with SME2 on, in none off.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import models  # noqa: F401  (registers the examples)
from pytest_sme2.categories import is_leaf
from pytest_sme2.devices.base import Variant
from pytest_sme2.devices.kernel_log import KERNEL_CSV_COLUMNS, Isa, kernel_isa
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.export import export_model
from pytest_sme2.kernels import PACKING, kernel_role, kernels_frame
from pytest_sme2.models import get_model
from pytest_sme2.ops import parse_op_name


@pytest.mark.parametrize(
    ("model", "dtype"), [("toy_cnn", "fp32"), ("toy_cnn", "int8"), ("vit_tiny", "fp32")]
)
def test_each_operators_kernels_sum_to_its_instructions_and_show_sme2_where_packed(
    qemu_device: QemuSme2Device, model: str, dtype: str, tmp_path: Path
) -> None:
    artifact = export_model(get_model(model).for_emulation(), dtype)
    packed_on = 0
    for variant in (Variant.ON, Variant.OFF):
        evidence = qemu_device.evidence(
            artifact.pte, artifact.inputs, variant, 1, tmp_path / variant
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
    qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    """The kernel view's point: data movement hidden inside a "Convolution" is counted."""
    artifact = export_model(get_model("toy_cnn").for_emulation(), "fp32")
    evidence = qemu_device.evidence(artifact.pte, artifact.inputs, Variant.ON, 1, tmp_path)
    convolutions = [
        op
        for op in evidence.operator_kernels
        if parse_op_name(op.name).packed and parse_op_name(op.name).operator == "Convolution"
    ]
    assert len(convolutions) >= 2
    for op in convolutions:
        packing = sum(n for f, n in op.functions.items() if kernel_role(f) == PACKING)
        assert 0 < packing < op.instructions, op.name
