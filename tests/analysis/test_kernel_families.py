"""Kernel names → kernel family, on names qemu-sme2 showed (the committed baselines' SME2 kernels,
the examples' KleidiAI NEON matmul) and names of the wheel's XNNPACK and KleidiAI conventions; an
operator's family by its largest compute kernel, and the families per operator kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.kernel_families import (
    KernelFamily,
    by_unpacked_kind,
    families_by_kind,
    families_text,
    kernel_family,
    operator_family,
)
from tests.measurements import LHS_QUANT_PACK, NEON_QB4W_MATMUL, PF32_MOPA, SME2_QP8_MATMUL

#: tiny_llama_prefill fp32's two SME2 GEMMs on qemu-sme2 (ExecuTorch 1.5.1)
PF32_MLA = "kai_kernel_matmul_clamp_f32_f32_f32p2vlx1b_1x16vl_sme2_mla"
LHS_PACK = "kai_kernel_lhs_imatmul_pack_x32p2vlx1_x32p_sme"
XNNPACK_CODE = "[libexecutorch_backend_xnnpack.so]"
BASELINES = sorted((Path(__file__).parents[2] / "baselines").glob("qemu-sme2*/*.json"))


@pytest.mark.parametrize(
    ("name", "family"),
    [
        (PF32_MOPA, KernelFamily.SME2_MOPA),
        ("kai_run_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa", KernelFamily.SME2_MOPA),
        (SME2_QP8_MATMUL, KernelFamily.SME2_MOPA),
        (PF32_MLA, KernelFamily.SME2_MLA),
        ("kai_kernel_matmul_clamp_f16_f16_f16p2vlx2b_1x16vl_sme2_dot", KernelFamily.SME2_MLA),
        (
            "kai_kernel_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot",
            KernelFamily.SME2_MLA,
        ),
        (
            "kai_run_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme2_sdot",
            KernelFamily.SME2_MLA,
        ),
        # XNNPACK's SME2 GEMMs say no instruction: the tile's rows do
        ("xnn_pf16_gemm_minmax_ukernel_32x32c2__neonsme2", KernelFamily.SME2_MOPA),
        ("xnn_qp8_f32_qc8w_gemm_minmax_ukernel_16x64c4__neonsme2", KernelFamily.SME2_MOPA),
        ("xnn_pf32_gemm_minmax_ukernel_1x32__neonsme2", KernelFamily.SME2_MLA),
        ("xnn_pf32_gemm_minmax_ukernel_32x32__neonsme", KernelFamily.SME1),
        ("kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa", KernelFamily.SME1),
        (NEON_QB4W_MATMUL, KernelFamily.NEON_I8MM),
        ("xnn_qs8_qc8w_gemm_minmax_fp32_ukernel_4x16c8__neoni8mm", KernelFamily.NEON_I8MM),
        (
            "kai_run_matmul_clamp_f32_qai8dxp1x8_qsi4c32p4x8_1x4x32_neon_dotprod",
            KernelFamily.NEON_DOTPROD,
        ),
        (
            "xnn_qd8_f32_qc8w_gemm_minmax_ukernel_4x16c4__neondotfp16arith",
            KernelFamily.NEON_DOTPROD,
        ),
        ("xnn_f32_gemm_minmax_ukernel_6x8__aarch64_neonfma_ld128", KernelFamily.NEON),
        ("xnn_f32_vadd_minmax_ukernel__neon_u8", KernelFamily.NEON),
        ("xnn_f32_gemm_minmax_ukernel_4x8__avx2_broadcast", KernelFamily.OTHER),
        ("xnn_f32_spmm_minmax_ukernel_8x4__scalar", KernelFamily.OTHER),
        # packing, whatever instruction set it is written for
        (LHS_PACK, KernelFamily.PACKING),
        ("kai_run_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme", KernelFamily.PACKING),
        ("xnn_x32_pack_lh_ukernel__neonsme2", KernelFamily.PACKING),
        (LHS_QUANT_PACK, KernelFamily.PACKING),
        (XNNPACK_CODE, KernelFamily.UNNAMED),
    ],
)
def test_a_kernel_name_says_its_family(name: str, family: KernelFamily) -> None:
    assert kernel_family(name) is family


@pytest.mark.parametrize("path", BASELINES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_sme2_kernel_qemu_sme2_recorded_is_mopa_or_mla_as_its_instruction_says(
    path: Path,
) -> None:
    """No SME2 kernel of the examples falls out of the two SME2 families: an outer-product
    (``_mopa``) one is MOPA, every other (``_mla``, ``_dot``) one-row."""
    names = {
        name
        for variant in json.loads(path.read_text())["variants"].values()
        for name in variant.get("sme2_kernels", ())
    }
    for name in names:
        expected = KernelFamily.SME2_MOPA if name.endswith("_mopa") else KernelFamily.SME2_MLA
        assert kernel_family(name) is expected, name


def test_an_operators_family_is_its_largest_compute_kernels_not_its_packing() -> None:
    # an SME2 GEMM that spends most in packing its LHS is still an SME2 GEMM
    assert operator_family({LHS_PACK: 600, PF32_MOPA: 300, XNNPACK_CODE: 100}) is (
        KernelFamily.SME2_MOPA
    )
    wrapper = "kai_run_matmul_clamp_f32_f32_f32p2vlx1b_1x16vl_sme2_mla"
    assert operator_family({wrapper: 40, PF32_MLA: 500, PF32_MOPA: 100}) is KernelFamily.SME2_MLA
    # qemu-sme2 shows XNNPACK's NEON microkernels without names: no named compute kernel
    assert operator_family({XNNPACK_CODE: 990, "xnn_invoke_runtime": 10}) is KernelFamily.UNNAMED
    assert operator_family({LHS_PACK: 10, XNNPACK_CODE: 90}) is KernelFamily.UNNAMED


def test_families_per_kind_count_xnnpacks_operators_and_match_without_packing() -> None:
    operators = (
        OperatorKernels("Fully Connected (NC, PF32) GEMM #1", 900, {PF32_MOPA: 800, LHS_PACK: 100}),
        OperatorKernels("Fully Connected (NC, PF32) GEMM #2", 900, {PF32_MOPA: 900}),
        OperatorKernels("Fully Connected (NC, PF32) GEMM #3", 300, {PF32_MLA: 300}),
        OperatorKernels("Fully Connected (NC, F32) GEMM #4", 700, {XNNPACK_CODE: 700}),
        OperatorKernels("native_call_index_put.out", 50, {"_ZN5torch8executor3fooEv": 50}),
    )
    kinds = families_by_kind(operators)
    assert kinds == {
        "Fully Connected (NC, F32) GEMM": {"unnamed": 1},
        "Fully Connected (NC, PF32) GEMM": {"SME2 MOPA": 2, "SME2 MLA": 1},
    }  # a portable operator runs no microkernel: it has no family
    assert by_unpacked_kind(kinds) == {
        "Fully Connected (NC, F32) GEMM": {"SME2 MOPA": 2, "SME2 MLA": 1, "unnamed": 1}
    }
    assert families_text({"SME2 MLA": 1, "SME2 MOPA": 14}) == "SME2 MOPA ×14 · SME2 MLA ×1"
    assert families_text({}) == "—"
