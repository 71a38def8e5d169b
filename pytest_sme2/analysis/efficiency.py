"""Efficiency: how much of each GEMM and convolution operator's work
(:mod:`pytest_sme2.analysis.work`) its cost bought, against what the hardware could do. Pure
functions over data.

Why: an SME2 gain says an operator got faster, not whether it runs at 5 % or 60 % of what the
unit can do. Two measures, by what the device's numbers are:

* **Emulated (instructions).** Multiply-adds per SME instruction, against the ideal: one outer
  product per instruction, each a full ZA tile. An FP32 FMOPA at an SVL of 512 bits is a 16 × 16
  outer product, 256 multiply-adds; a 16-bit FMOPA (two-way, widening into FP32) does twice as
  many and an 8-bit SMOPA (four-way, into INT32) four times as many; each halves with the SVL
  (:func:`ideal_macs_per_sme`). The qemu count gives SME instructions per function of the counted
  inference; an operator's are its functions' instructions at each function's SME share, exact
  for a kernel whose instructions all run inside one operator and an estimate (≈) where one
  kernel serves several operators differently. Multiply-adds per instruction (all, SME or not) are
  shown for both variants too: that is what the SME2-off variant can be compared on.
* **Timed (milliseconds).** Achieved GFLOP/s (two floating-point operations per multiply-add)
  of the fastest traced run of each operator, against the chip's peak where a published figure
  exists (:data:`CHIP_PEAKS`) or ``--sme2-peak`` gives one; "peak unknown" otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.categories import is_leaf
from pytest_sme2.analysis.kernel_families import operator_family
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.analysis.trace import Run
from pytest_sme2.analysis.work import OperatorWork

#: an FP32 lane's bits: an SVL of ``s`` bits holds ``s / 32`` FP32 lanes, and an FMOPA multiplies
#: every lane of one vector by every lane of another
FP32_BITS = 32


@dataclass(frozen=True)
class ChipPeak:
    """A published peak of one chip's matrix unit for one operand type, and where it is from."""

    chip: str  # the start of the device's chip name ("Apple M4" matches M4, M4 Pro, M4 Max)
    dtype_bits: int  # the operands' width: 32 for FP32
    gflops: float
    source: str


#: The chips whose SME peak is published. Apple M4: one SME unit per cluster; its FP32
#: outer-product peak is about 2 TFLOPS per P-cluster (Remke and Breuer, "Hello SME!",
#: arXiv 2409.18779; LIBXSMM reaches 1.76 TFLOPS on a 512³ SGEMM). One runner thread uses one
#: cluster's unit, so the figure holds for the M4 Pro and Max too; the runner's thread is taken to
#: run on a P-core (macOS schedules a default-QoS thread there). No E-cluster or phone figure is
#: published that we know of: their peak is unknown, as are the M4's for other operand types.
CHIP_PEAKS: tuple[ChipPeak, ...] = (
    ChipPeak(
        "Apple M4",
        32,
        2000.0,
        "Apple M4 P-cluster SME, FP32: about 2 TFLOPS (arXiv 2409.18779)",
    ),
)
#: what an unknown peak is called
PEAK_UNKNOWN = "peak unknown"


@dataclass(frozen=True)
class Peak:
    """The peak an operator's GFLOP/s is compared with, and where it is from; ``gflops`` None
    where no figure is known."""

    gflops: float | None
    source: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Peak:
        return cls(data["gflops"], data["source"])


def chip_peak(chip: str, dtype: str, override_gflops: float | None = None) -> Peak:
    """The peak for a case of ``dtype`` on ``chip``: ``override_gflops`` (``--sme2-peak``)
    where given, else the table's figure for the chip and the dtype's operand width."""
    if override_gflops is not None:
        return Peak(override_gflops, f"--sme2-peak={override_gflops:g}")
    bits = dtype_bits(dtype)
    for known in CHIP_PEAKS:
        if chip.startswith(known.chip) and known.dtype_bits == bits:
            return Peak(known.gflops, known.source)
    return Peak(None, f"{PEAK_UNKNOWN} for {chip or 'this chip'} at {bits}-bit operands")


def dtype_bits(dtype: str) -> int:
    """The GEMM operands' width of a case dtype: fp16 16, the int8 and int4 recipes 8 (their
    activations are quantised to 8 bits), else 32."""
    if dtype in ("fp16", "bf16"):
        return 16
    if dtype.startswith("int") or dtype in ("8da4w",):
        return 8
    return FP32_BITS


def operand_bits(event_name: str) -> int:
    """The width of an XNNPACK operator's left-hand operand, from its datatypes: 8 for any
    quantised one (``QS8``, ``QP8``, ``QD8``, ``PQS8``…), 16 for ``F16``/``PF16``, else 32."""
    datatypes = parse_op_name(event_name).datatypes
    if any(dt.lstrip("P").startswith("Q") for dt in datatypes):
        return 8
    if any(dt.lstrip("P") in ("F16", "BF16") for dt in datatypes):
        return 16
    return FP32_BITS


def ideal_macs_per_sme(svl_bytes: int, bits: int) -> int:
    """Multiply-adds of one full-tile outer product at an SVL of ``svl_bytes`` for ``bits``-wide
    operands: ``(SVL / 32)²`` FP32 lanes, times ``32 / bits`` for the widening two- and four-way
    products (an FP32 FMOPA at SVL 512: 256; int8 SMOPA: 1024)."""
    lanes = svl_bytes * 8 // FP32_BITS
    return lanes * lanes * (FP32_BITS // bits)


@dataclass(frozen=True)
class OperatorEfficiency:
    """One GEMM or convolution operator instance's work and what it cost.

    ``instructions`` and ``sme_instructions`` where the device counts them (``sme_instructions``
    estimated from each function's SME share), ``ideal`` the multiply-adds of one full-tile outer
    product for its operands (where the SVL is known); ``ms`` its fastest traced run where time
    means something, ``peak`` the chip's GFLOP/s.
    """

    name: str
    shape: str
    macs: int | None
    family: str = ""
    instructions: int | None = None
    sme_instructions: int | None = None
    ideal: int | None = None
    ms: float | None = None
    peak: float | None = None
    #: its delegate call's instruction id (XNNPACK numbers operators per call: ``#1`` repeats)
    call: int | None = None

    @property
    def macs_per_instruction(self) -> float | None:
        if self.macs is None or not self.instructions:
            return None
        return self.macs / self.instructions

    @property
    def macs_per_sme(self) -> float | None:
        if self.macs is None or not self.sme_instructions:
            return None
        return self.macs / self.sme_instructions

    @property
    def ideal_share(self) -> float | None:
        """Multiply-adds per SME instruction as a share of one full-tile outer product's."""
        per_sme = self.macs_per_sme
        return None if per_sme is None or not self.ideal else per_sme / self.ideal

    @property
    def gflops(self) -> float | None:
        if self.macs is None or not self.ms:
            return None
        return 2 * self.macs / (self.ms * 1e6)

    @property
    def peak_share(self) -> float | None:
        gflops = self.gflops
        return None if gflops is None or not self.peak else gflops / self.peak


def sme_share_of_functions(
    operators: Sequence[OperatorKernels], sme_functions: Mapping[str, int]
) -> dict[str, float]:
    """Function → the share of its instructions in the counted inference's operators that are SME
    instructions (at most 1: a function also run outside any operator event)."""
    totals: dict[str, int] = {}
    for operator in operators:
        for name, count in operator.functions.items():
            totals[name] = totals.get(name, 0) + count
    return {
        name: min(1.0, sme / totals[name])
        for name, sme in sme_functions.items()
        if totals.get(name)
    }


def counted_efficiency(
    work: Sequence[OperatorWork],
    operators: Sequence[OperatorKernels],
    sme_functions: Mapping[str, int],
    svl_bytes: int | None,
) -> tuple[OperatorEfficiency, ...]:
    """Each operator of ``work`` with its instructions, SME instructions and family from the
    counted inference's ``operators`` (matched by position among the leaf events, and name)."""
    shares = sme_share_of_functions(operators, sme_functions)
    found = []
    for op in work:
        kernels = operators[op.position] if op.position < len(operators) else None
        if kernels is None or kernels.name != op.name:
            found.append(OperatorEfficiency(op.name, op.shape, op.macs, call=op.call))
            continue
        sme = sum(count * shares.get(name, 0.0) for name, count in kernels.functions.items())
        bits = operand_bits(op.name)
        found.append(
            OperatorEfficiency(
                op.name,
                op.shape,
                op.macs,
                family=str(operator_family(kernels.functions)),
                instructions=kernels.instructions,
                sme_instructions=round(sme),
                ideal=ideal_macs_per_sme(svl_bytes, bits) if svl_bytes else None,
                call=op.call,
            )
        )
    return tuple(found)


def fastest_ms(runs: Sequence[Run]) -> dict[int, float]:
    """Position among a run's leaf events → its fastest duration over ``runs`` (ms)."""
    fastest: dict[int, float] = {}
    for run in runs:
        position = 0
        for event in run.events:
            if is_leaf(event.name):
                ms = event.duration_ms
                fastest[position] = min(ms, fastest.get(position, ms))
                position += 1
    return fastest


def timed_efficiency(
    work: Sequence[OperatorWork], runs: Sequence[Run], peak: Peak | None
) -> tuple[OperatorEfficiency, ...]:
    """Each operator of ``work`` with its fastest time over the kept traced ``runs`` and the
    chip's ``peak``; an operator XNNPACK timed at 0 µs (its clock's floor) has no GFLOP/s."""
    fastest = fastest_ms(runs)
    return tuple(
        OperatorEfficiency(
            op.name,
            op.shape,
            op.macs,
            family="SME2 (packed)" if parse_op_name(op.name).packed else "",
            ms=fastest.get(op.position) or None,
            peak=peak.gflops if peak else None,
            call=op.call,
        )
        for op in work
    )


@dataclass(frozen=True)
class CaseWork:
    """A variant's GEMM and convolution work in one inference, summed."""

    operators: int
    unknown: int
    macs: int
    instructions: int | None = None
    sme_instructions: int | None = None
    ms: float | None = None
    #: the work of the operators that executed SME instructions
    sme_macs: int = 0
    #: the fewest SME instructions their work needs: one full-tile outer product each, for each
    #: operator's operands (an int8-dynamic model's fp32 layers at FP32's); None where the SVL is
    #: unknown
    ideal_sme_instructions: float | None = None

    @property
    def gflops(self) -> float | None:
        return 2 * self.macs / (self.ms * 1e6) if self.ms else None


def case_work(found: Sequence[OperatorEfficiency]) -> CaseWork:
    """``found``'s operators summed (those of known work for the costs, so a ratio compares like
    with like)."""
    known = [op for op in found if op.macs is not None]

    def total(values: list[int | float | None]) -> Any:
        return sum(values) if values and None not in values else None  # type: ignore[arg-type]

    on_sme = [op for op in known if op.sme_instructions]
    ideal = [op.macs / op.ideal for op in on_sme if op.macs is not None and op.ideal]
    return CaseWork(
        operators=len(found),
        unknown=len(found) - len(known),
        macs=sum(op.macs for op in known if op.macs is not None),
        instructions=total([op.instructions for op in known]),
        sme_instructions=total([op.sme_instructions for op in known]),
        ms=total([op.ms for op in known]),
        sme_macs=sum(op.macs for op in on_sme if op.macs is not None),
        ideal_sme_instructions=sum(ideal) if on_sme and len(ideal) == len(on_sme) else None,
    )
