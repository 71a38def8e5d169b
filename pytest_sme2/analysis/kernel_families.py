"""Kernel families: which kind of code a kernel's name says it is (an SME2 outer-product GEMM, an
SME2 one-row GEMM, SME1, NEON with i8mm or dotprod, plain NEON, packing), and the family of each
operator by the compute kernel it spent most instructions in. Pure functions of names and counts.

Why: an operator's SME2 kernels say *that* SME2 ran in it, not *how*. tiny_llama_prefill fp32 on
qemu-sme2 runs KleidiAI's ``…_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa`` (outer products into ZA, for
many rows) in some fully connected layers and ``…_f32_f32p2vlx1b_1x16vl_sme2_mla`` (multi-vector
multiply-accumulate, one row) in another; a library update that moves a layer from one to the
other, or to NEON, changes its cost by a factor, and the family names that move in one word.

The names follow two conventions. KleidiAI's: ``kai_<run|kernel>_matmul_<fused ops>_<dst>_<lhs>_
<rhs>_<mr x nr x kacc>_<technology>_<feature>[_<instruction>]`` — technology ``neon``, feature
``dotprod``, ``i8mm`` or ``sme2`` (``sme`` for SME1), instruction ``mopa``, ``mla``, ``dot``,
``sdot``. XNNPACK's: ``xnn_<dtypes>_<op>_<variant>_ukernel_<MR>x<NR>…__<arch chain>`` with
``neonsme2``, ``neonsme``, ``neoni8mm``, ``neondot…`` or ``neon…`` in the chain; its SME2 GEMMs
wrap KleidiAI's, a tile of one row (``1x32``) the one-row kernel, any other the outer-product one.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.kernel_names import Isa, describe_kernel, is_unnamed_code, kernel_isa
from pytest_sme2.analysis.kernels import COMPUTE, PACKING, kernel_role
from pytest_sme2.analysis.ops import parse_op_name


class KernelFamily(enum.StrEnum):
    """What kind of code a kernel is, by its name (:func:`kernel_family`)."""

    SME2_MOPA = "SME2 MOPA"  # outer products into ZA tiles: many rows at once
    SME2_MLA = "SME2 MLA"  # multi-vector multiply-accumulate or dot products: one row
    SME1 = "SME1"  # SME without SME2 instructions
    NEON_I8MM = "NEON i8mm"
    NEON_DOTPROD = "NEON dotprod"
    NEON = "NEON"  # any other aarch64 vector kernel
    OTHER = "other"  # scalar, x86, or a name that says no instruction set
    PACKING = "packing"  # LHS/RHS packing routines: they move operands, not a compute family
    UNNAMED = "unnamed"  # no named compute kernel: code no symbol names (qemu-sme2's NEON)


#: KleidiAI's instruction words of SME2 kernels that work one row at a time
_ONE_ROW_INSTRUCTIONS = frozenset({"mla", "fmla", "dot", "sdot", "udot", "usdot"})


def kernel_family(name: str) -> KernelFamily:
    """The family of the kernel ``name``: :data:`~KernelFamily.PACKING` for a packing routine
    (whatever its instruction set), :data:`~KernelFamily.UNNAMED` for code no symbol names, else
    by its instruction set (:func:`~pytest_sme2.analysis.kernel_names.kernel_isa`) and, for SME2,
    whether it works one row (:func:`_one_row`) or many, for NEON its feature."""
    if is_unnamed_code(name):
        return KernelFamily.UNNAMED
    if kernel_role(name) == PACKING:
        return KernelFamily.PACKING
    isa = kernel_isa(name)
    if isa is Isa.SME2:
        return KernelFamily.SME2_MLA if _one_row(name) else KernelFamily.SME2_MOPA
    if isa is Isa.SME:
        return KernelFamily.SME1
    if isa is Isa.NEON:
        words = _words(name)
        if any("i8mm" in word for word in words):
            return KernelFamily.NEON_I8MM
        if any(word == "dotprod" or word.startswith("neondot") for word in words):
            return KernelFamily.NEON_DOTPROD
        return KernelFamily.NEON
    return KernelFamily.OTHER


def _one_row(name: str) -> bool:
    """Whether an SME2 kernel's name says it computes one row at a time: KleidiAI's instruction
    word (``_sme2_mla``, ``_sme2_dot``; ``_sme2_mopa`` is outer products), else the tile's rows
    (``1x16vl``, XNNPACK's ``1x32``; ``2vlx2vl``, ``32x32`` are many). A name that says neither
    is read as outer products, SME's matrix use."""
    words = _words(name)
    if "mopa" in words:
        return False
    if not _ONE_ROW_INSTRUCTIONS.isdisjoint(words):
        return True
    return describe_kernel(name).ukernel_shape.split("x")[0] == "1"


def _words(name: str) -> list[str]:
    return name.lower().split("_")


def operator_family(functions: Mapping[str, int]) -> KernelFamily:
    """An operator's family: that of the compute kernel with the most instructions in it (its
    packing routines left out: an SME2 GEMM that spends most in packing is still an SME2 GEMM),
    :data:`~KernelFamily.UNNAMED` where no named compute kernel ran (qemu-sme2 shows XNNPACK's
    NEON microkernels without names: the wheels do not export them)."""
    compute = [name for name in functions if kernel_role(name) == COMPUTE]
    if not compute:
        return KernelFamily.UNNAMED
    return kernel_family(max(compute, key=lambda name: functions[name]))


def families_by_kind(operators: Iterable[OperatorKernels]) -> dict[str, dict[str, int]]:
    """Operator kind (the name without `` #n``, as in a profile) → family → how many of its
    operators (events of the counted inference) are of that family, most first; XNNPACK's
    operators only (a portable ``native_call_*`` operator runs no microkernel to choose)."""
    kinds: dict[str, Counter[str]] = {}
    for operator in operators:
        op = parse_op_name(operator.name)
        if op.source == "xnnpack":
            family = operator_family(operator.functions)
            kinds.setdefault(op.key, Counter())[str(family)] += 1
    return {kind: dict(families.most_common()) for kind, families in sorted(kinds.items())}


def by_unpacked_kind(kinds: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """``kinds`` (kind → family → operators) matched without their packing, as every comparison
    of the variants matches kinds (``PF32`` = ``F32``): the counts of kinds that meet summed. A
    layer that fell from SME2 to NEON is renamed (``PF32`` → ``F32``), and stays the same kind."""
    summed: dict[str, Counter[str]] = {}
    for kind, families in kinds.items():
        summed.setdefault(parse_op_name(kind).unpacked_key, Counter()).update(families)
    return {kind: dict(families.most_common()) for kind, families in sorted(summed.items())}


def families_text(families: Mapping[str, int]) -> str:
    """``SME2 MOPA ×14 · SME2 MLA ×1``: each family with its operators, most first."""
    ranked = sorted(families.items(), key=lambda item: (-item[1], item[0]))
    return " · ".join(f"{family} ×{count}" for family, count in ranked) or "—"
