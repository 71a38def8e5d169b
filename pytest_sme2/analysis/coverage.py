"""SME2 coverage: the share of a variant's delegated GEMM and convolution work (multiply-adds,
:mod:`pytest_sme2.analysis.work`) that ran in SME2 kernels. Pure functions over data.

Why work and not instructions or operators: "SME2 kernels (on): 2 ran" holds as long as one GEMM
uses SME2, and an SME2 kernel needs far fewer instructions for the same work, so a share of
instructions would understate what SME2 does. A quantizer, shape or library change that sends
half the linear layers back to NEON (8da4w's QB4W layers have no SME2 path) halves the coverage.

Which operator ran SME2, by what the device shows:

* **kernels per operator** (qemu-sme2): the family of its largest compute kernel
  (:func:`pytest_sme2.analysis.kernel_families.operator_family`) is SME2 MOPA or SME2 MLA;
* **operator names** (devices): a packed SME operand type (``PF32``, ``PF16``, ``PQS8``) is
  XNNPACK's SME path; a dynamic int8 ``QP8`` GEMM is named alike on NEON, so it counts as SME2
  only where the device's kernel log shows an SME2 ``qai8dxp`` matmul ran.

An SME2 operator can still spend most of its instructions packing its left-hand side on NEON (a
QP8 GEMM of 16 rows: three quarters): :attr:`OperatorCoverage.packing_share` says how much.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.kernel_families import KernelFamily, operator_family
from pytest_sme2.analysis.kernel_names import Isa, kernel_isa
from pytest_sme2.analysis.kernels import PACKING, kernel_role
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.analysis.work import OperatorWork

SME2_FAMILIES = frozenset({KernelFamily.SME2_MOPA, KernelFamily.SME2_MLA})
#: the share of an SME2 operator's instructions in packing above which a report says its work
#: goes mostly to packing rather than to the SME2 compute kernel
MOSTLY_PACKING = 0.5


@dataclass(frozen=True)
class OperatorCoverage:
    """One GEMM or convolution operator of known work, and whether it ran SME2."""

    name: str  # the event's name
    call: int
    shape: str
    macs: int
    sme2: bool
    family: str = ""
    #: the share of its instructions in packing routines, where the device counts them
    packing_share: float | None = None

    @property
    def label(self) -> str:
        """How a baseline names it across variants and runs: its kind without SME packing
        (``PF32`` = ``F32``: a layer that left SME2 keeps its label), its number in its
        delegate call, the call, and its shape."""
        op = parse_op_name(self.name)
        return f"{op.unpacked_key} #{op.instance} @{self.call} ({self.shape})"

    @property
    def mostly_packing(self) -> bool:
        return self.sme2 and (self.packing_share or 0.0) > MOSTLY_PACKING


@dataclass(frozen=True)
class Coverage:
    """A variant's GEMM and convolution operators of known work, and how many were unknown."""

    operators: tuple[OperatorCoverage, ...]
    unknown: int = 0

    @property
    def macs(self) -> int:
        return sum(op.macs for op in self.operators)

    @property
    def sme2_macs(self) -> int:
        return sum(op.macs for op in self.operators if op.sme2)

    @property
    def percent(self) -> float | None:
        """SME2's share of the work in percent; None where there is no known work."""
        return 100 * self.sme2_macs / self.macs if self.macs else None

    @property
    def outside(self) -> tuple[OperatorCoverage, ...]:
        """The operators that did not run SME2, the most work first."""
        return tuple(sorted((op for op in self.operators if not op.sme2), key=lambda o: -o.macs))

    def sme2_labels(self) -> tuple[str, ...]:
        return tuple(sorted(op.label for op in self.operators if op.sme2))


def _packing_share(functions: Mapping[str, int]) -> float | None:
    total = sum(functions.values())
    if not total:
        return None
    return sum(n for name, n in functions.items() if kernel_role(name) == PACKING) / total


def counted_coverage(
    work: Sequence[OperatorWork], operators: Sequence[OperatorKernels]
) -> Coverage:
    """Coverage from the kernels each operator ran (matched by position and name, as
    :func:`pytest_sme2.analysis.efficiency.counted_efficiency` matches them); an operator whose
    work or kernels are unknown is counted as unknown."""
    found, unknown = [], 0
    for op in work:
        kernels = operators[op.position] if op.position < len(operators) else None
        if op.macs is None or kernels is None or kernels.name != op.name:
            unknown += 1
            continue
        family = operator_family(kernels.functions)
        found.append(
            OperatorCoverage(
                op.name,
                op.call,
                op.shape,
                op.macs,
                family in SME2_FAMILIES,
                str(family),
                _packing_share(kernels.functions),
            )
        )
    return Coverage(tuple(found), unknown)


def named_coverage(work: Sequence[OperatorWork], logged_kernels: Iterable[str] = ()) -> Coverage:
    """Coverage from operator names: packed SME operands are SME2's; a ``QP8`` GEMM is where the
    kernel log (``logged_kernels``) shows an SME2 matmul of a ``qai8dxp`` left-hand side."""
    qp8_on_sme2 = any(
        kernel_isa(name) is Isa.SME2 and "qai8dxp" in name and "matmul" in name
        for name in logged_kernels
    )
    found, unknown = [], 0
    for op in work:
        if op.macs is None:
            unknown += 1
            continue
        parsed = parse_op_name(op.name)
        sme2 = parsed.packed or ("QP8" in parsed.datatypes and qp8_on_sme2)
        family = "SME2 (by name)" if sme2 else "not SME2 (by name)"
        found.append(OperatorCoverage(op.name, op.call, op.shape, op.macs, sme2, family))
    return Coverage(tuple(found), unknown)
