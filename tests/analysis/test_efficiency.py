"""Efficiency of each operator's work: the ideal outer product per SME instruction for the SVL
and the operands, the known chips' peaks (and the override), multiply-adds per SME instruction
from a counted inference's functions, and GFLOP/s from traced runs of known times."""

from __future__ import annotations

import pytest

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.efficiency import (
    PEAK_UNKNOWN,
    Peak,
    case_work,
    chip_peak,
    counted_efficiency,
    ideal_macs_per_sme,
    operand_bits,
    timed_efficiency,
)
from pytest_sme2.analysis.trace import Event, Run
from pytest_sme2.analysis.work import OperatorWork

FC = "Fully Connected (NC, PF32) GEMM"
MOPA = "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa"
PACK = "kai_run_lhs_pack_f32p2vlx1_f32_sme"


@pytest.mark.parametrize(
    ("svl_bytes", "bits", "macs"),
    [(64, 32, 256), (64, 16, 512), (64, 8, 1024), (32, 32, 64), (32, 8, 256)],
)
def test_the_ideal_is_one_full_tile_outer_product(svl_bytes: int, bits: int, macs: int) -> None:
    """FP32 FMOPA at SVL 512 is 16 × 16; widening 16- and 8-bit products are two- and
    four-way; SVL 256 holds half the lanes each way."""
    assert ideal_macs_per_sme(svl_bytes, bits) == macs


def test_operand_width_is_read_from_the_operators_datatypes() -> None:
    assert operand_bits("Fully Connected (NC, PF32) GEMM #1") == 32
    assert operand_bits("Convolution (NHWC, PF16) IGEMM #2") == 16
    assert operand_bits("Fully Connected (NC, QP8, F32, QC8W) GEMM #1") == 8
    assert operand_bits("Convolution (NHWC, PQS8, QS8, QC8W) IGEMM #1") == 8


def test_known_chips_have_a_sourced_peak_and_the_rest_none() -> None:
    for chip in ("Apple M4", "Apple M4 Pro", "Apple M4 Max"):
        peak = chip_peak(chip, "fp32")
        assert peak.gflops == 2000.0 and "arXiv 2409.18779" in peak.source
    assert chip_peak("Apple M4", "fp16").gflops is None  # no published 16-bit figure
    unknown = chip_peak("MT6993", "fp32")
    assert unknown.gflops is None and unknown.source.startswith(f"{PEAK_UNKNOWN} for MT6993")
    assert chip_peak("MT6993", "int8", 4000.0) == Peak(4000.0, "--sme2-peak=4000")


def test_multiply_adds_per_sme_instruction_from_the_functions_sme_share() -> None:
    """Two layers share one MOPA kernel: 1,000 of its 2,000 instructions in the inference are
    SME, so each layer's SME instructions are half its MOPA instructions; packing has none."""
    work = (
        OperatorWork(f"{FC} #1", 0, 7, 256_000, "linear M=64 N=100 K=40", 64),
        OperatorWork(f"{FC} #2", 2, 7, 64_000, "linear M=16 N=100 K=40", 16),
    )
    kernels = (
        OperatorKernels(f"{FC} #1", 3_000, {MOPA: 1_600, PACK: 1_400}),
        OperatorKernels("Add (ND) #1", 50, {"[libxnnpack]": 50}),
        OperatorKernels(f"{FC} #2", 1_000, {MOPA: 400, PACK: 600}),
    )
    first, second = counted_efficiency(work, kernels, {MOPA: 1_000}, svl_bytes=64)
    assert (first.sme_instructions, second.sme_instructions) == (800, 200)
    assert first.macs_per_sme == 320 and first.ideal == 256 and first.ideal_share == 1.25
    assert second.macs_per_sme == 320 and second.macs_per_instruction == 64
    assert first.family == "SME2 MOPA" and first.call == 7
    total = case_work((first, second))
    assert (total.macs, total.instructions, total.sme_instructions) == (320_000, 4_000, 1_000)
    # the fewest SME instructions the work needs: one 256-MAC outer product each
    assert total.sme_macs == 320_000 and total.ideal_sme_instructions == 1_250
    # an operator whose event is not where the work says is not costed
    (lost,) = counted_efficiency(work[:1], kernels[1:], {MOPA: 1_000}, svl_bytes=64)
    assert lost.instructions is None and lost.macs == 256_000


def _run(index: int, durations_us: tuple[int, ...]) -> Run:
    """A run of one delegate call whose operators took ``durations_us``."""
    events = [Event("Method::execute", 0, 10_000_000, -1, 0, False, None, 0)]
    events.append(Event("DELEGATE_CALL", 0, 9_000_000, 0, 1, False, None, 3))
    start = 0
    for n, us in enumerate(durations_us, 1):
        events.append(Event(f"{FC} #{n}", start, start + us * 1000, 1, 2, True, f"{FC} #{n}", 3))
        start += us * 1000
    return Run(index, 10_000_000, tuple(events))


def test_gflops_from_the_fastest_traced_run_against_the_peak() -> None:
    """Two GFLOP (a billion MACs) in 2 ms is 1,000 GFLOP/s: half of a 2,000 GFLOP/s peak; the
    fastest of the runs counts, and an operator floored to 0 µs has no figure."""
    work = (
        OperatorWork(f"{FC} #1", 0, 3, 1_000_000_000, "linear M=1000 N=1000 K=1000", 1000),
        OperatorWork(f"{FC} #2", 1, 3, 1_000, "linear M=1 N=10 K=100", 1),
    )
    runs = (_run(0, (2_500, 0)), _run(1, (2_000, 0)), _run(2, (3_000, 0)))
    big, tiny = timed_efficiency(work, runs, Peak(2000.0, "test"))
    assert big.ms == 2.0 and big.gflops == 1000.0 and big.peak_share == 0.5
    assert big.family == "SME2 (packed)"
    assert tiny.ms is None and tiny.gflops is None
    (unknown,) = timed_efficiency(work[:1], runs, Peak(None, PEAK_UNKNOWN))
    assert unknown.gflops == 1000.0 and unknown.peak_share is None
    assert case_work((big,)).gflops == 1000.0
