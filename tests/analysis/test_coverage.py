"""SME2 coverage from what each device shows: the kernels each operator ran (its largest compute
kernel's family), or operator names and the kernel log; an operator of unknown work is counted
apart, and an SME2 operator spending most of its instructions packing is marked."""

from __future__ import annotations

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.coverage import counted_coverage, named_coverage
from pytest_sme2.analysis.work import OperatorWork
from tests.measurements import LHS_QUANT_PACK, NEON_QB4W_MATMUL, PF32_MOPA, SME2_QP8_MATMUL

QP8 = "Fully Connected (NC, QP8, F32, QC8W) GEMM"
QB4W = "Fully Connected (NC, QP8, F32, QB4W) GEMM"
PF32 = "Fully Connected (NC, PF32) GEMM"


def test_coverage_is_the_work_share_of_operators_whose_largest_compute_kernel_is_sme2() -> None:
    work = (
        OperatorWork(f"{QB4W} #1", 0, 4, 3_000, "linear M=16 N=64 K=64", 16),
        OperatorWork(f"{QP8} #1", 1, 6, 1_000, "linear M=16 N=64 K=32", 16),
        OperatorWork(f"{QP8} #2", 2, 6, None),  # work unknown
    )
    kernels = (
        OperatorKernels(f"{QB4W} #1", 900, {NEON_QB4W_MATMUL: 700, LHS_QUANT_PACK: 200}),
        OperatorKernels(f"{QP8} #1", 1_000, {LHS_QUANT_PACK: 750, SME2_QP8_MATMUL: 250}),
        OperatorKernels(f"{QP8} #2", 1_000, {SME2_QP8_MATMUL: 1_000}),
    )
    coverage = counted_coverage(work, kernels)
    assert coverage.percent == 25.0 and coverage.unknown == 1
    (outside,) = coverage.outside
    assert outside.family == "NEON i8mm" and outside.label == (
        "Fully Connected (NC, QP8, F32, QB4W) GEMM #1 @4 (linear M=16 N=64 K=64)"
    )
    (sme2,) = [op for op in coverage.operators if op.sme2]
    # three quarters of its instructions quantize and pack its input: SME2, mostly packing
    assert sme2.family == "SME2 MOPA" and sme2.packing_share == 0.75 and sme2.mostly_packing
    assert coverage.sme2_labels() == (f"{QP8} #1 @6 (linear M=16 N=64 K=32)",)


def test_a_layer_that_left_sme2_keeps_its_label() -> None:
    """PF32 → F32 is the same layer: the baseline names it whichever way it ran."""
    on = OperatorWork(f"{PF32} #2", 0, 9, 10, "linear M=1 N=10 K=1", 1)
    off = OperatorWork("Fully Connected (NC, F32) GEMM #2", 0, 9, 10, "linear M=1 N=10 K=1", 1)
    packed = counted_coverage((on,), (OperatorKernels(on.name, 10, {PF32_MOPA: 10}),))
    neon = counted_coverage((off,), (OperatorKernels(off.name, 10, {"[libxnnpack]": 10}),))
    assert packed.operators[0].label == neon.operators[0].label
    assert (packed.percent, neon.percent) == (100.0, 0.0)


def test_by_name_packed_operands_are_sme2_and_qp8_only_with_an_sme2_kernel_logged() -> None:
    work = (
        OperatorWork(f"{PF32} #1", 0, 1, 300, "linear M=4 N=5 K=15", 4),
        OperatorWork(f"{QP8} #1", 1, 1, 100, "linear M=4 N=5 K=5", 4),
    )
    assert named_coverage(work).percent == 75.0
    assert named_coverage(work, (SME2_QP8_MATMUL,)).percent == 100.0
    assert named_coverage(work, (NEON_QB4W_MATMUL,)).percent == 75.0
