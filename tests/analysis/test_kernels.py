"""Kernel names → parts, role and category, on the symbols of the real aarch64 XNNPACK library in
the executorch wheel the qemu-sme2 device runs (listed with the cross toolchain's ``nm``); and
the per-kind kernel sets and ``kernels.csv`` made from them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.categories import CONVOLUTION, DATA_MOVEMENT, ELEMENTWISE, GEMM
from pytest_sme2.analysis.kernel_names import (
    KERNEL_CSV_COLUMNS,
    ExecutedKernel,
    Isa,
    describe_kernel,
    kernel_isa,
    readable,
)
from pytest_sme2.analysis.kernels import (
    COMPUTE,
    KERNELS_CSV_COLUMNS,
    OTHER_ROLE,
    PACKING,
    LayersWithoutSme2,
    kernel_category,
    kernel_role,
    kernels_by_kind,
    kernels_frame,
    layers_without_sme2,
    sme2_kernels_by_kind,
)
from pytest_sme2.devices.provision import QemuToolchain, provision_qemu
from tests.measurements import LHS_QUANT_PACK, NEON_QB4W_MATMUL, PF32_MOPA, SME2_QP8_MATMUL

GETTERS = ("_get_mr", "_get_nr")


@pytest.fixture(scope="module")
def xnnpack_symbols() -> list[str]:
    """The function symbols of the wheel's ``libexecutorch_backend_xnnpack.so``."""
    toolchain: QemuToolchain = provision_qemu(log=lambda _: None)
    library = toolchain.executorch_dir / "lib" / "libexecutorch_backend_xnnpack.so"
    nm = str(toolchain.cc).removesuffix("gcc") + "nm"
    listed = subprocess.run(
        [nm, "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    )
    return [line.split()[-1] for line in listed.stdout.splitlines() if " T " in line]


def test_every_xnnpack_microkernel_of_the_wheel_splits_into_the_kits_fields(
    xnnpack_symbols: list[str],
) -> None:
    # the getters name the kernel they belong to: ``<kernel>_get_mr``
    names = {name.removesuffix(GETTERS[0]).removesuffix(GETTERS[1]) for name in xnnpack_symbols}
    kernels = sorted(n for n in names if n.startswith("xnn_") and "_ukernel_" in n)
    assert len(kernels) >= 40
    for name in kernels:
        kernel = describe_kernel(name)
        assert kernel.dtype and kernel.xnn_op and kernel.arch_chain, name
        assert (
            name
            == "_".join(
                filter(None, ("xnn", kernel.dtype, kernel.xnn_op, kernel.variant, "ukernel"))
            )
            + (f"_{kernel.ukernel_shape}" if kernel.ukernel_shape else "")
            + f"__{kernel.arch_chain}"
        )
        assert (kernel.isa is Isa.SME2) == kernel.arch_chain.startswith("neonsme2"), name
        assert kernel_role(name) == COMPUTE, name
    sme2 = [n for n in kernels if kernel_isa(n) is Isa.SME2]
    assert describe_kernel("xnn_pqs8_qc8w_igemm_minmax_fp32_ukernel_32x32c4__neonsme2") in {
        describe_kernel(n) for n in sme2
    }
    igemm = describe_kernel("xnn_pqs8_qc8w_igemm_minmax_fp32_ukernel_32x32c4__neonsme2")
    assert (igemm.dtype, igemm.xnn_op, igemm.variant, igemm.ukernel_shape) == (
        "pqs8_qc8w",
        "igemm",
        "minmax_fp32",
        "32x32c4",
    )


def test_kleidiai_routines_of_the_wheel_are_packing_or_compute_by_name(
    xnnpack_symbols: list[str],
) -> None:
    runs = [n for n in xnnpack_symbols if n.startswith(("kai_run_", "kai_kernel_"))]
    packs = [n for n in runs if "_pack_" in n]
    matmuls = [n for n in runs if "_matmul_" in n and "_pack_" not in n]
    assert len(packs) >= 20 and len(matmuls) >= 20
    assert {kernel_role(n) for n in packs} == {PACKING}
    assert {kernel_role(n) for n in matmuls} == {COMPUTE}
    assert {kernel_category(n) for n in packs} == {DATA_MOVEMENT}
    for name in runs:
        kernel = describe_kernel(name)
        assert kernel.xnn_op and kernel.dtype, name
        prefix = "kai_run_" if name.startswith("kai_run_") else "kai_kernel_"
        parts = (kernel.xnn_op, kernel.variant, kernel.dtype, kernel.ukernel_shape)
        assert name == prefix + "_".join(filter(None, (*parts, kernel.arch_chain))), name
        assert kernel.has_sme2 == kernel.arch_chain.startswith("sme2"), name
    assert {kernel_role(n) for n in xnnpack_symbols if n.startswith("kai_get_")} <= {
        OTHER_ROLE,
        PACKING,  # getters of packing routines still say "pack"
    }
    # the SME2 outer-product matmuls are SME2; the LHS packing they use is named SME
    assert kernel_isa("kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa") is (
        Isa.SME2
    )
    assert "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa" in matmuls


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("xnn_pf32_igemm_minmax_ukernel_32x32__neonsme2", CONVOLUTION),
        ("xnn_pf32_gemm_minmax_ukernel_1x32__neonsme2", GEMM),
        ("xnn_f16_gemm_minmax_ukernel_6x16__neonfp16arith_ld64", GEMM),
        ("xnn_f32_vexp_ukernel__neon_rational_3_2_div_u12", ELEMENTWISE),
        ("xnn_f32_vcopysign_ukernel__neon_u12", ELEMENTWISE),
        ("xnn_f32_spmm_minmax_ukernel_8x4__scalar", CONVOLUTION),
        ("kai_kernel_lhs_imatmul_pack_x32p2vlx1_x32p_sme", DATA_MOVEMENT),
        ("kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa", GEMM),
        ("[libexecutorch_backend_xnnpack.so]", "Other"),
    ],
)
def test_category_follows_the_classifiers_conventions(
    xnnpack_symbols: list[str], name: str, category: str
) -> None:
    stripped = {n.removesuffix(GETTERS[0]).removesuffix(GETTERS[1]) for n in xnnpack_symbols}
    assert name in stripped or name.startswith("[")  # names of the real library
    assert kernel_category(name) == category


PACK = "kai_run_lhs_imatmul_pack_x32p2vlx1_x32p_sme"
MOPA = "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa"
OPERATORS = (
    OperatorKernels("Convolution (NHWC, PF32) IGEMM #1", 100, {PACK: 60, MOPA: 30, "[lib]": 10}),
    OperatorKernels("Convolution (NHWC, PF32) IGEMM #2", 50, {MOPA: 40, PACK: 10}),
    OperatorKernels("Transpose (ND, X32) #1", 7, {"[lib]": 7}),
)


def test_kinds_sum_their_events_functions_and_keep_their_sme2_kernels() -> None:
    kinds = kernels_by_kind(OPERATORS)
    assert kinds["Convolution (NHWC, PF32) IGEMM"] == {PACK: 70, MOPA: 70, "[lib]": 10}
    assert sum(kinds["Convolution (NHWC, PF32) IGEMM"].values()) == 150
    assert sme2_kernels_by_kind(OPERATORS) == {"Convolution (NHWC, PF32) IGEMM": (MOPA,)}


def test_kernels_csv_has_the_kits_columns_and_its_0_1_flags() -> None:
    frame = kernels_frame(
        "toy_cnn_xnnpack_fp32",
        (
            ExecutedKernel(MOPA, count=2, instructions=70),
            ExecutedKernel("xnn_f32_vadd_minmax_ukernel__neon_u8", count=3, kind="vbinary"),
        ),
    )
    assert tuple(frame.columns) == KERNELS_CSV_COLUMNS
    assert KERNELS_CSV_COLUMNS[: len(KERNEL_CSV_COLUMNS)] == KERNEL_CSV_COLUMNS
    mopa, vadd = frame.to_dict("records")
    assert (mopa["has_sme"], mopa["has_sme2"], mopa["category"], mopa["count"]) == (1, 1, GEMM, 2)
    assert mopa["instructions"] == 70
    assert (vadd["has_sme"], vadd["has_sme2"], vadd["category"]) == (0, 0, ELEMENTWISE)
    assert (vadd["dtype"], vadd["xnn_op"], vadd["variant"], vadd["arch_chain"]) == (
        "f32",
        "vadd",
        "minmax",
        "neon_u8",
    )
    assert frame["instructions"].isna().tolist() == [False, True]


def test_a_weight_type_none_of_whose_layers_ran_sme2_is_named_with_what_ran() -> None:
    """8da4w on qemu-sme2: the QB4W layers run NEON i8mm with SME2 on; the fp32 layer beside them
    running SME2 proves nothing for them."""
    qb4w = "Fully Connected (NC, QP8, F32, QB4W) GEMM"
    operators = (
        OperatorKernels(f"{qb4w} #1", 420, {NEON_QB4W_MATMUL: 379, LHS_QUANT_PACK: 38, "[x]": 3}),
        OperatorKernels(f"{qb4w} #2", 416, {NEON_QB4W_MATMUL: 344, LHS_QUANT_PACK: 69, "[x]": 3}),
        OperatorKernels("Fully Connected (NC, PF32) GEMM #3", 100, {PF32_MOPA: 100}),
        OperatorKernels("Convolution (NHWC, F32) DWConv #4", 60, {"xnn_f32_dwconv_neon": 60}),
    )
    (group,) = layers_without_sme2(operators, 1000)
    assert group == LayersWithoutSme2("QB4W", (qb4w,), (NEON_QB4W_MATMUL,), 0.836)
    assert group.sentence("8da4w") == (
        f"8da4w layers with QB4W weights ({qb4w}; 83.6% of the inference's instructions) ran "
        f"{NEON_QB4W_MATMUL} with SME2 on: no SME2 kernel, so SME2 cannot speed them up here"
    )
    # the depthwise convolution has no SME2 kernel to miss; a small group is not worth a failure
    assert layers_without_sme2(operators[2:], 1000) == ()
    assert layers_without_sme2(operators, 100_000) == ()


def test_a_layer_on_neon_beside_an_sme2_layer_of_its_weight_type_is_xnnpacks_choice() -> None:
    """int8-dynamic on qemu-sme2: QD8 convolutions run NEON beside SME2 QP8 fully connected layers
    of the same QC8W weights (mobilenet_v3_small, vit_tiny): no weight type lacks SME2."""
    operators = (
        OperatorKernels("Convolution (NHWC, QD8, F32, QC8W) IGEMM #1", 150, {"[x]": 150}),
        OperatorKernels(
            "Fully Connected (NC, QP8, F32, QC8W) GEMM #2", 300, {SME2_QP8_MATMUL: 300}
        ),
    )
    assert layers_without_sme2(operators, 1000) == ()


QEMU_BASELINES = sorted((Path(__file__).parents[2] / "baselines" / "qemu-sme2").glob("*.json"))


@pytest.mark.parametrize("path", QEMU_BASELINES, ids=lambda p: p.stem)
def test_no_example_recorded_on_qemu_sme2_has_a_weight_type_without_sme2(path: Path) -> None:
    """No false red: every example case, as its baseline recorded it (each SME2-on operator
    kind's instructions and SME2 kernels), passes the rule require_sme2_kernels now applies,
    although mobilenet_v3_small fp16 runs 45 % of its instructions in F16 layers on NEON. A
    model that registers ``require_sme2_kernels: False`` for a dtype (tiny_llama's 8da4w) must
    have the layers that make it so."""
    import models  # noqa: F401  (registers the examples)
    from pytest_sme2.export.model_spec import get_model

    baseline = json.loads(path.read_text())
    on = baseline["variants"]["sme2-on"]
    required = get_model(baseline["model"]).expectations(baseline["dtype"])
    required = required.get("require_sme2_kernels", True)
    operators = tuple(
        OperatorKernels(
            kind,
            count,
            dict.fromkeys(on["operator_sme2_kernels"].get(kind, ("[x]",)), count),
        )
        for kind, count in on["operator_instructions"].items()
    )
    assert on["operator_sme2_kernels"], "recorded before kernels per operator: nothing to judge"
    without = layers_without_sme2(operators, on["instructions"])
    assert (without == ()) == required, without


@pytest.mark.parametrize(
    ("symbol", "shown"),
    [
        # what tiny_llama_decode's expand_copy ran on qemu-sme2 (ExecuTorch 1.5.1's portable ops)
        (
            "_ZN5torch8executor13repeat_tensorERKN10executorch7runtime7etensor6TensorENS2_8Array"
            "RefIlEERS4_",
            "torch::executor::repeat_tensor(…)",
        ),
        (
            "_ZNK10executorch7runtime7etensor10TensorImpl12element_sizeEv",
            "executorch::runtime::etensor::TensorImpl::element_size() const",
        ),
        ("_ZNSt6vectorIiSaIiEE9push_backERKi", "std::vector<…>::push_back(…)"),
        ("xnn_f32_gemm_minmax_ukernel_4x8__neonfma", "xnn_f32_gemm_minmax_ukernel_4x8__neonfma"),
        ("[libexecutorch.so]", "[libexecutorch.so]"),
        ("_Znot_a_symbol", "_Znot_a_symbol"),
    ],
)
def test_symbols_read_as_a_person_reads_them(symbol: str, shown: str) -> None:
    assert readable(symbol) == shown


def test_kernels_csv_names_cpp_functions_demangled() -> None:
    mangled = "_ZN5torch8executor13repeat_tensorERKN10executorch7runtime7etensor6TensorENS2_8Array"
    mangled += "RefIlEERS4_"
    frame = kernels_frame("m", [ExecutedKernel(mangled, 3, instructions=10)])
    assert list(frame["kernel_name"]) == ["torch::executor::repeat_tensor(…)"]
