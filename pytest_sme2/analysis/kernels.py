"""Microkernels: what each one is (packing, compute, other), per operator kind, and the
reference kit's ``kernels.csv``. Pure functions over the evidence devices collect.

Why: an operator's name says *that* SME2 took it (``PF32``), not where its cost goes. A packed
SME2 convolution runs LHS packing, RHS packing and the outer-product matmul; on qemu-sme2 each of
their instructions is counted inside the operator (:func:`pytest_sme2.analysis.attribution.
operator_kernels`), so data movement hidden inside a "Convolution" becomes visible. The kit's
``kernels.csv`` (one row per microkernel, its name split into dtype, op, variant, shape and arch)
is what its ``generate_kernel_view.py`` compares between SME2-on and SME2-off.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.categories import (
    CONVOLUTION,
    DATA_MOVEMENT,
    ELEMENTWISE,
    GEMM,
    OTHER,
    subcategory,
)
from pytest_sme2.analysis.kernel_names import (
    KERNEL_CSV_COLUMNS,
    ExecutedKernel,
    Isa,
    describe_kernel,
    is_unnamed_code,
    kernel_isa,
)
from pytest_sme2.analysis.ops import parse_op_name

if TYPE_CHECKING:
    import pandas as pd

PACKING, COMPUTE, OTHER_ROLE, NO_SYMBOL = "packing", "compute", "other", "no symbol"
"""What a function does inside an operator: moves operands into a kernel's layout, computes
the operator's result, anything else (runtime, dispatch, getters); or unknown: code without a
symbol (the wheels export few of XNNPACK's microkernels: most NEON ones are hidden)."""
ROLES = (PACKING, COMPUTE, OTHER_ROLE, NO_SYMBOL)

#: An operator, category or group of layers above this share of E2E matters (the reference
#: report's 5 %): below it, neither a bottleneck nor a kernel choice worth a sentence or a failure.
BOTTLENECK_SHARE = 0.05
#: Sub-categories of GEMM-like work XNNPACK can run on SME2 kernels (KleidiAI's packed matmuls).
#: Not depthwise convolutions, deconvolutions or attention: they have no SME2 kernel to miss.
SME_CAPABLE_SUBCATEGORIES = frozenset({"convolution", "fully connected", "batch matmul"})

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
    :func:`pytest_sme2.analysis.kernel_names.unnamed_code`); :data:`OTHER_ROLE` for the rest."""
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


def ran_sme2(functions: Iterable[str]) -> bool:
    """Whether an SME2 kernel is among ``functions``: an operator took the SME2 path whatever its
    name says (a dynamic int8 ``QP8`` GEMM is named alike with and without SME2)."""
    return any(kernel_isa(name) is Isa.SME2 for name in functions)


def weight_type(name: str) -> str:
    """The weight operand type of a GEMM-like XNNPACK operator, SME packing taken out: the last
    datatype (``Fully Connected (NC, QP8, F32, QB4W) GEMM`` → ``QB4W``, ``(NC, PF32)`` →
    ``F32``). XNNPACK picks a layer's kernel family by it: layers sharing it share kernels."""
    op = parse_op_name(parse_op_name(name).unpacked_key)
    return op.datatypes[-1] if op.datatypes else op.operator


@dataclass(frozen=True)
class LayersWithoutSme2:
    """The GEMM-like layers of one weight type that ran no SME2 kernel with SME2 on, while the
    CPU had SME2: XNNPACK/KleidiAI have no SME2 kernel for them (8da4w's ``QB4W`` in ExecuTorch
    1.5.1 runs ``…_neon_i8mm`` with SME2 on and off), so SME2 cannot speed them up."""

    weights: str  # the weight type, e.g. "QB4W"
    kinds: tuple[str, ...]  # their operator kinds
    kernels: tuple[str, ...]  # the compute kernels that ran instead, most instructions first
    share: float  # of the inference's instructions

    def sentence(self, dtype: str) -> str:
        ran = ", ".join(self.kernels) or "no named compute kernel"
        return (
            f"{dtype} layers with {self.weights} weights ({', '.join(self.kinds)}; "
            f"{100 * self.share:.1f}% of the inference's instructions) ran {ran} with SME2 on: "
            "no SME2 kernel, so SME2 cannot speed them up here"
        )


def layers_without_sme2(
    operators: Sequence[OperatorKernels], instructions: int
) -> tuple[LayersWithoutSme2, ...]:
    """The groups of delegated GEMM-like layers (one group per weight type) of an SME2-on
    inference of ``instructions`` in which no layer ran an SME2 kernel, largest first; groups
    under :data:`BOTTLENECK_SHARE` are left out.

    Grouped by weight type, not judged per operator, because XNNPACK also chooses by shape:
    with SME2 on, mobilenet_v3_small fp16 runs 40 of its 42 fully connected layers (45 % of its
    instructions) on NEON, and int8-dynamic convolutions (``QD8``) run NEON beside SME2 ``QP8``
    fully connected layers of the same ``QC8W`` weights. A weight type none of whose layers
    ran SME2 is the missing kernel; the rest is XNNPACK's choice, reported, never failed.
    """
    groups: dict[str, list[OperatorKernels]] = {}
    for operator in operators:
        op = parse_op_name(operator.name)
        if op.source == "xnnpack" and subcategory(operator.name) in SME_CAPABLE_SUBCATEGORIES:
            groups.setdefault(weight_type(operator.name), []).append(operator)
    found = []
    for weights, members in groups.items():
        functions: Counter[str] = Counter()
        for operator in members:
            functions.update(operator.functions)
        total = sum(functions.values())
        share = total / instructions if instructions else 0.0
        if ran_sme2(functions) or share < BOTTLENECK_SHARE:
            continue
        compute = [
            name
            for name, count in functions.most_common()
            if kernel_role(name) == COMPUTE and count >= BOTTLENECK_SHARE * total
        ]
        kinds = tuple(dict.fromkeys(parse_op_name(o.name).key for o in members))
        found.append(LayersWithoutSme2(weights, kinds, tuple(compute), share))
    return tuple(sorted(found, key=lambda group: -group.share))


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
