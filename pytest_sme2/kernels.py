"""Microkernels: what each one is (packing, compute, other), per operator kind, and the
reference kit's ``kernels.csv``. Pure functions over the evidence devices collect.

Why: an operator's name says *that* SME2 took it (``PF32``), not where its cost goes. A packed
SME2 convolution runs LHS packing, RHS packing and the outer-product matmul; on qemu-sme2 each of
their instructions is counted inside the operator (:func:`pytest_sme2.attribution.
operator_kernels`), so data movement hidden inside a "Convolution" becomes visible. The kit's
``kernels.csv`` (one row per microkernel, its name split into dtype, op, variant, shape and arch)
is what its ``generate_kernel_view.py`` compares between SME2-on and SME2-off.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from pytest_sme2.attribution import OperatorKernels
from pytest_sme2.categories import CONVOLUTION, DATA_MOVEMENT, ELEMENTWISE, GEMM, OTHER
from pytest_sme2.devices.base import ExecutedKernel
from pytest_sme2.devices.kernel_log import KERNEL_CSV_COLUMNS, Isa, describe_kernel, kernel_isa
from pytest_sme2.devices.qemu_log import is_unnamed_code
from pytest_sme2.ops import parse_op_name

if TYPE_CHECKING:
    import pandas as pd

PACKING, COMPUTE, OTHER_ROLE, NO_SYMBOL = "packing", "compute", "other", "no symbol"
"""What a function does inside an operator: moves operands into a kernel's layout, computes
the operator's result, anything else (runtime, dispatch, getters); or unknown: code without a
symbol (the wheels export few of XNNPACK's microkernels: most NEON ones are hidden)."""
ROLES = (PACKING, COMPUTE, OTHER_ROLE, NO_SYMBOL)

#: ``kernels.csv`` columns: the kit's, then the instructions where the device counts them (the
#: kit's readers take columns by name, so an extra one is read past)
KERNELS_CSV_COLUMNS: tuple[str, ...] = (*KERNEL_CSV_COLUMNS, "instructions")

#: operator words of XNNPACK/KleidiAI kernel names → our category of the work they do
_OP_CATEGORY: Mapping[str, str] = {
    "gemm": GEMM,
    "matmul": GEMM,
    "ppmm": GEMM,
    "spmm": CONVOLUTION,
    "igemm": CONVOLUTION,
    "conv": CONVOLUTION,
    "dwconv": CONVOLUTION,
    "imatmul": CONVOLUTION,
    "transpose": DATA_MOVEMENT,
    "transposec": DATA_MOVEMENT,
    "copy": DATA_MOVEMENT,
    "fill": DATA_MOVEMENT,
    "pad": DATA_MOVEMENT,
    "zip": DATA_MOVEMENT,
    "vcvt": DATA_MOVEMENT,
}


def _words(name: str) -> list[str]:
    return [w for w in name.lower().split("_") if w]


def kernel_role(name: str) -> str:
    """:data:`PACKING` for any name with a ``pack`` word (``kai_run_lhs_imatmul_pack_…``,
    ``xnn_x32_pack_lh_ukernel__neonsme2``, ``xnn_pack_kai_…``); :data:`COMPUTE` for XNNPACK
    microkernels (``xnn_*_ukernel_*``) and KleidiAI matmuls (``kai_run_matmul_*``,
    ``kai_kernel_matmul_*``); :data:`NO_SYMBOL` for code no symbol names (``[<library>]``,
    :func:`pytest_sme2.devices.qemu_log.unnamed_code`); :data:`OTHER_ROLE` for the rest."""
    if is_unnamed_code(name):
        return NO_SYMBOL
    words = _words(name)
    if "pack" in words:
        return PACKING
    if words[:1] == ["xnn"] and "ukernel" in words and not words[-1].startswith("get"):
        return COMPUTE
    if words[:2] in (["kai", "run"], ["kai", "kernel"]) and "matmul" in words:
        return COMPUTE
    return OTHER_ROLE


def is_kernel(name: str) -> bool:
    """Whether ``name`` is a microkernel or packing routine (a ``kernels.csv`` row)."""
    return kernel_role(name) in (PACKING, COMPUTE)


def kernel_category(name: str, kind: str = "") -> str:
    """The category (Convolution, GEMM, Data Movement, Elementwise, Other) of the work a kernel
    does, by the classifier's conventions: matrix products are GEMM, indirect (``igemm``,
    ``imatmul``) and depthwise ones Convolution, packing and layout copies Data Movement,
    XNNPACK's vector ops (``vadd``, ``vbinary``, ``vunary``…) Elementwise. ``kind`` (the kernel
    log's word) decides where the name does not."""
    if kernel_role(name) == PACKING:  # ``lhs_imatmul_pack``: packing for a convolution
        return DATA_MOVEMENT
    for word in (*_words(name), kind.lower()):
        if word in _OP_CATEGORY:
            return _OP_CATEGORY[word]
    described = describe_kernel(name)
    if described.xnn_op.startswith("v") or kind.lower() in ("binary", "unary", "vbinary"):
        return ELEMENTWISE
    return OTHER


def kernels_of_operators(operators: Sequence[OperatorKernels]) -> tuple[ExecutedKernel, ...]:
    """The kernels that ran in a counted inference's operators: each with the operator events
    it ran in and its instructions there, most instructions first."""
    events: Counter[str] = Counter()
    instructions: Counter[str] = Counter()
    for operator in operators:
        for name, count in operator.functions.items():
            if is_kernel(name):
                events[name] += 1
                instructions[name] += count
    return tuple(
        ExecutedKernel(name=name, count=events[name], instructions=count)
        for name, count in instructions.most_common()
    )


def kernels_by_kind(operators: Iterable[OperatorKernels]) -> dict[str, dict[str, int]]:
    """Operator kind (the name without `` #n``, as in a profile) → instructions per function
    over its events, most first; each kind's sum is its instructions in the inference."""
    kinds: dict[str, Counter[str]] = {}
    for operator in operators:
        kinds.setdefault(parse_op_name(operator.name).key, Counter()).update(operator.functions)
    return {kind: dict(functions.most_common()) for kind, functions in kinds.items()}


def sme2_kernels_by_kind(operators: Iterable[OperatorKernels]) -> dict[str, tuple[str, ...]]:
    """Operator kind → the SME2 kernels (by name) that ran in it, sorted; kinds without any are
    left out. What a baseline stores to see a library update change the kernel selection."""
    kinds = kernels_by_kind(operators)
    return {
        kind: names
        for kind, functions in sorted(kinds.items())
        if (names := tuple(sorted(n for n in functions if kernel_isa(n) is Isa.SME2)))
    }


def kernels_frame(model_id: str, kernels: Sequence[ExecutedKernel]) -> pd.DataFrame:
    """``kernels.csv`` of one variant: one row per kernel, the kit's columns
    (:data:`KERNELS_CSV_COLUMNS`), the name split as XNNPACK names are built, ``has_sme`` and
    ``has_sme2`` as the kit writes them (1/0), ``category`` by :func:`kernel_category`."""
    import pandas as pd  # deferred: only the artifacts writer makes frames

    rows = []
    for kernel in kernels:
        described = describe_kernel(kernel.name, kernel.kind, kernel.count)
        rows.append(
            {
                **described.csv_row(model_id),
                "category": kernel_category(kernel.name, kernel.kind),
                "has_sme": int(described.has_sme),
                "has_sme2": int(described.has_sme2),
                "instructions": kernel.instructions,
            }
        )
    return pd.DataFrame(rows, columns=list(KERNELS_CSV_COLUMNS)).astype({"instructions": "Int64"})
