"""Kernel-log parsing: XNNPACK's "Using <kind> microkernel" lines from Debug runners (stderr and
logcat), the SME2/SME/NEON reading of kernel names, and the reference kit's kernels.csv fields.

The sample lines are the formats XNNPACK's logger writes (``Note (XNNPACK): `` on stdio, tag
``XNNPACK`` through Android's log) with kernel names seen on Apple M4 and Android SME2 devices
(docs/sme2-evidence.md) and in the executorch 1.5.1 aarch64 wheel.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sme2.analysis.kernel_names import KERNEL_CSV_COLUMNS, Isa, describe_kernel, kernel_isa
from pytest_sme2.analysis.kernels import kernels_frame
from pytest_sme2.devices.kernel_log import (
    KernelLogs,
    kernel_evidence,
    logged_kernels,
    parse_kernel_log,
)
from pytest_sme2.records.device import Variant

STDERR_LOG = """\
I 00:00:00.000512 executorch:sme2_runner.cpp:301] Loading model
Note (XNNPACK): Using igemm microkernel 'xnn_pf16_f16_igemm_minmax_fp16_ukernel_32x32c2__neonsme2'.
Note (XNNPACK): Using gemm microkernel 'xnn_pf16_gemm_minmax_ukernel_32x32c2__neonsme2'.
Note (XNNPACK): Using gemm microkernel 'xnn_pf16_gemm_minmax_ukernel_1x32c2__neonsme2'.
Note (XNNPACK): Using transposec microkernel 'xnn_x32_transposec_ukernel__4x4_aarch64_neon_tbl128'.
Note (XNNPACK): Using gemm microkernel 'xnn_pf16_gemm_minmax_ukernel_32x32c2__neonsme2'.
Model executed successfully 5 time(s) in 12.5 ms.
"""

# logcat's default (threadtime) format: date time pid tid level tag: message
LOGCAT = "--------- beginning of main\n" + "".join(
    f"03-14 10:22:01.12{i}  4242  4242 I XNNPACK : Using {kind} microkernel '{name}'.\n"
    for i, (kind, name) in enumerate(
        [
            ("gemm", "xnn_f16_gemm_minmax_ukernel_6x16__asm_aarch64_neonfp16arith_cortex_a75"),
            ("dqgemm", "xnn_qd8_f32_qc8w_gemm_minmax_ukernel_4x16c4__neondotfp16arith"),
            ("qp8gemm", "xnn_qp8_f32_qc8w_gemm_minmax_ukernel_16x64c4__neonsme2"),
            ("gemm", "xnn_pf32_gemm_minmax_ukernel_32x32__neonsme"),
        ]
    )
)


def test_stderr_lines_give_each_kernel_once_with_its_count_in_first_use_order() -> None:
    kernels = parse_kernel_log(STDERR_LOG.splitlines())
    assert [k.name for k in kernels] == [
        "xnn_pf16_f16_igemm_minmax_fp16_ukernel_32x32c2__neonsme2",
        "xnn_pf16_gemm_minmax_ukernel_32x32c2__neonsme2",
        "xnn_pf16_gemm_minmax_ukernel_1x32c2__neonsme2",
        "xnn_x32_transposec_ukernel__4x4_aarch64_neon_tbl128",
    ]
    assert [k.count for k in kernels] == [1, 2, 1, 1]
    assert [k.kind for k in kernels] == ["igemm", "gemm", "gemm", "transposec"]


def test_logcat_lines_parse_like_stderr_lines() -> None:
    kernels = {k.name: k for k in parse_kernel_log(LOGCAT.splitlines())}
    assert len(kernels) == 4
    qp8 = kernels["xnn_qp8_f32_qc8w_gemm_minmax_ukernel_16x64c4__neonsme2"]
    assert (qp8.kind, qp8.isa, qp8.has_sme2) == ("qp8gemm", Isa.SME2, True)
    sme1 = kernels["xnn_pf32_gemm_minmax_ukernel_32x32__neonsme"]
    assert (sme1.isa, sme1.has_sme, sme1.has_sme2) == (Isa.SME, True, False)
    neon = kernels["xnn_f16_gemm_minmax_ukernel_6x16__asm_aarch64_neonfp16arith_cortex_a75"]
    assert (neon.isa, neon.has_sme) == (Isa.NEON, False)


def test_a_log_without_kernel_lines_gives_nothing() -> None:
    release = "Model executed successfully 5 time(s) in 12.5 ms.\nW XNNPACK : unrelated\n"
    assert parse_kernel_log(release.splitlines()) == ()


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        (
            "xnn_pf16_f16_igemm_minmax_fp16_ukernel_32x32c2__neonsme2",
            ("pf16_f16", "igemm", "minmax_fp16", "32x32c2", "neonsme2"),
        ),
        (
            "xnn_f16_gemm_minmax_ukernel_6x16__asm_aarch64_neonfp16arith_cortex_a75",
            ("f16", "gemm", "minmax", "6x16", "asm_aarch64_neonfp16arith_cortex_a75"),
        ),
        (
            "xnn_qp8_f32_qc8w_gemm_minmax_ukernel_16x64c4__neonsme2",
            ("qp8_f32_qc8w", "gemm", "minmax", "16x64c4", "neonsme2"),
        ),
        ("xnn_f32_vadd_minmax_ukernel__neon_u8", ("f32", "vadd", "minmax", "", "neon_u8")),
        (
            "xnn_x32_transposec_ukernel__4x4_aarch64_neon_tbl128",
            ("x32", "transposec", "", "4x4", "aarch64_neon_tbl128"),
        ),
        (
            "xnn_f32_dwconv2d_chw_ukernel_3x3p1__neon_2x4",
            ("f32", "dwconv2d", "chw", "3x3p1", "neon_2x4"),
        ),
        # KleidiAI: op, variant, dtypes (output, LHS, RHS), tile, arch — in their own order
        (
            "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa",
            ("f32_f32p2vlx1_f32p2vlx1biasf32", "matmul", "clamp", "", "sme2_mopa"),
        ),
        (
            "kai_kernel_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa",
            ("f32_qai8dxp1vlx4_qsi8cxp4vlx4", "matmul", "clamp", "1vlx4vl", "sme2_mopa"),
        ),
        (
            "kai_run_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme",
            ("f32p2vlx1biasf32_f32_f32", "rhs_pack", "kxn", "", "sme"),
        ),
        ("kai_run_lhs_quant_pack_qai8dxp_f32", ("qai8dxp_f32", "lhs_quant_pack", "", "", "")),
    ],
)
def test_names_split_into_the_reference_kits_fields(
    name: str, fields: tuple[str, str, str, str, str]
) -> None:
    kernel = describe_kernel(name)
    got = (kernel.dtype, kernel.xnn_op, kernel.variant, kernel.ukernel_shape, kernel.arch_chain)
    assert got == fields


@pytest.mark.parametrize(
    ("name", "isa"),
    [
        ("xnn_pf16_gemm_minmax_ukernel_1x32c2__neonsme2", Isa.SME2),
        ("xnn_pf32_gemm_minmax_ukernel_32x32__neonsme", Isa.SME),
        ("kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa", Isa.SME2),
        ("kai_kernel_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot", Isa.SME2),
        ("kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa", Isa.SME),
        ("kai_kernel_lhs_imatmul_pack_x32p2vlx1_x32p_sme", Isa.SME),
        ("xnn_f32_gemm_minmax_ukernel_6x8__aarch64_neonfma_ld128", Isa.NEON),
        ("xnn_f32_gemm_minmax_ukernel_4x8__scalar", Isa.OTHER),
        ("xnn_f32_gemm_minmax_ukernel_4x8__avx2_broadcast", Isa.OTHER),
    ],
)
def test_isa_comes_from_the_names_words(name: str, isa: Isa) -> None:
    assert kernel_isa(name) is isa


def test_csv_row_has_the_reference_kits_columns() -> None:
    (kernel,) = parse_kernel_log(LOGCAT.splitlines()[3:4])
    row = kernel.csv_row("squeezesam_fp16")
    assert tuple(row) == KERNEL_CSV_COLUMNS
    assert row["model_id"] == "squeezesam_fp16"
    assert row["category"] == "qp8gemm" and row["count"] == 1
    assert (row["has_sme"], row["has_sme2"]) == (True, True)


def test_evidence_sorts_names_into_sme2_and_sme1_only() -> None:
    names = [
        "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa",
        "kai_kernel_lhs_imatmul_pack_x32p2vlx1_x32p_sme",
        "xnn_f32_vadd_minmax_ukernel__neon_u8",
        "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa",
        "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa",
    ]
    evidence = kernel_evidence(names, source="test", instructions=10, sme_instructions=2)
    assert evidence.sme2_kernels == (names[0],)
    # SME1 compute once; NEON and the SME packing kernel (operand preparation) left out
    assert evidence.sme_kernels == (names[3],)
    assert (evidence.instructions, evidence.sme_instructions, evidence.source) == (10, 2, "test")


def test_kernels_of_several_processes_keep_every_name_and_one_processs_count() -> None:
    """A device runs a case in several processes (rounds); kernels.csv counts like the kit's,
    from one run's log: the most lines one process logged."""
    first = logged_kernels({}, parse_kernel_log(STDERR_LOG.splitlines()))
    both = logged_kernels(first, parse_kernel_log([*STDERR_LOG.splitlines(), *LOGCAT.splitlines()]))
    assert len(both) == 8
    pf16 = both["xnn_pf16_gemm_minmax_ukernel_32x32c2__neonsme2"]
    assert (pf16.count, pf16.kind, pf16.instructions) == (2, "gemm", None)
    evidence = kernel_evidence(both, source="XNNPACK kernel log", executed=tuple(both.values()))
    assert evidence.kernels == tuple(both.values())
    frame = kernels_frame("squeezesam_xnnpack_fp16", evidence.kernels)
    transpose = frame[frame["kernel_name"].str.contains("transposec")].iloc[0]
    assert (transpose["category"], transpose["has_sme"]) == ("Data Movement", 0)
    assert frame["has_sme2"].sum() == 4  # three PF16 kernels and the QP8 one


def test_a_devices_kernel_logs_are_kept_per_program_and_variant() -> None:
    """What android and mac keep between a case's runs and its evidence: each (program, variant)
    its own kernels, merged over the runs; none logged (a Release runner) is no evidence."""
    logs = KernelLogs("XNNPACK kernel log (logcat)")
    program, other = Path("a.pte"), Path("b.pte")
    logs.add(program, Variant.ON, STDERR_LOG.splitlines())
    logs.add(program, Variant.ON, LOGCAT.splitlines())
    logs.add(program, Variant.OFF, ["Model executed successfully 5 time(s) in 12.5 ms."])
    on = logs.evidence(program, Variant.ON)
    assert on is not None and on.source == "XNNPACK kernel log (logcat)"
    assert len(on.kernels) == 8 and len(on.sme2_kernels) == 4
    assert logs.evidence(program, Variant.OFF) is None
    assert logs.evidence(other, Variant.ON) is None
