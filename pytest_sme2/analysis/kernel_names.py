"""What a kernel's name says: its instruction set (SME2, SME, NEON), dtype, operator and tile, and
the row of the reference kit's ``kernels.csv`` it makes.

Apart from the devices that find the names (a Debug runner's kernel log, qemu's exec log) because
naming is analysis: pure functions of a string, used by every report and gate that speaks of
kernels. XNNPACK's names (``xnn_pf16_gemm_minmax_ukernel_32x32c2__neonsme2``) and KleidiAI's
(``kai_kernel_matmul_..._sme2_mopa``) are both read.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ExecutedKernel:
    """One microkernel (or packing routine) a variant ran, as its evidence shows it: a row of
    the reference kit's ``kernels.csv`` (:mod:`pytest_sme2.analysis.kernels`)."""

    name: str
    #: the kernel log's lines naming it (once per config initialisation); from qemu's exec log,
    #: the operator events of the counted inference it executed in
    count: int
    #: the kernel log's word for it (``gemm``, ``igemm``, ``vbinary``…); "" from an exec log
    kind: str = ""
    #: its instructions in the counted inference, where the device counts them
    instructions: int | None = None


# xnn_<dtypes>_<op>[_<variant>]_ukernel[_<shape>][__<arch chain>]
_XNN_NAME = re.compile(
    r"^xnn_(?P<head>\w+?)_ukernel(?:_(?P<shape>[0-9a-z]+))?(?:__(?P<arch>\w+))?$"
)
# A dtype word of an XNNPACK name: f32, f16, bf16, pf32, qs8, qc8w, qp8, qd8, qb4w, x32, xx, ...
_DTYPE_WORD = re.compile(r"^(?:[a-z]{0,3}\d+[a-z]*|xx)$")
_TILE = re.compile(r"^\d+x\d+\w*$")
# KleidiAI: kai_<run|kernel>_<op words>_<dtype words>[_<tile>][_<arch words>]
_KAI_NAME = re.compile(r"^kai_(?:run|kernel)_(?P<rest>\w+)$")
_KAI_ARCH = re.compile(r"_(?P<arch>(?:sme2|sme|neon)(?:_[a-z0-9]+)*)$")
_KAI_LAYOUTS = frozenset({"kxn", "nxk"})

KERNEL_CSV_COLUMNS: tuple[str, ...] = (
    "model_id",
    "kernel_name",
    "category",
    "count",
    "dtype",
    "xnn_op",
    "variant",
    "ukernel_shape",
    "arch_chain",
    "has_sme",
    "has_sme2",
)
"""The reference kit's ``kernels.csv`` columns, which users' tooling reads."""


class Isa(enum.StrEnum):
    """What instruction set a kernel name says it is written for."""

    SME2 = "sme2"
    SME = "sme"  # SME1 only: SME without SME2 instructions
    NEON = "neon"
    OTHER = "other"  # scalar, x86, or a name that does not say


def kernel_isa(name: str) -> Isa:
    """Classify a kernel name by its ISA words.

    XNNPACK names end in an arch chain after ``__`` (``__neonsme2``, ``__neonsme``,
    ``__asm_aarch64_neonfp16arith_cortex_a75``); KleidiAI names carry ``_sme2_`` or ``_sme``
    words (``..._sme2_mopa``, ``lhs_imatmul_pack_x32p2vlx1_x32p_sme``). SME2 wins over SME:
    an SME2 kernel may also use SME1 instructions, never the reverse.
    """
    words = set(name.lower().split("_"))
    if words & {"sme2", "neonsme2"} or any(w.startswith(("sme2p", "neonsme2")) for w in words):
        return Isa.SME2
    if words & {"sme", "neonsme"}:
        return Isa.SME
    if any("neon" in word or word in {"aarch64", "asimd"} for word in words):
        return Isa.NEON
    return Isa.OTHER


@dataclass(frozen=True)
class KernelUse:
    """One microkernel a run chose, with what its name says (the reference kit's kernels.csv
    fields; empty strings where the name does not have the part)."""

    name: str
    kind: str  # as the log says it: gemm, igemm, dqgemm, qp8gemm, transposec, ...
    count: int  # log lines naming it (once per config initialisation, not per call)
    dtype: str  # xnn_pf16_f16_igemm... -> "pf16_f16"
    xnn_op: str  # "igemm"
    variant: str  # "minmax_fp16"
    ukernel_shape: str  # "32x32c2"
    arch_chain: str  # "neonsme2"
    isa: Isa

    @property
    def has_sme(self) -> bool:
        return self.isa in (Isa.SME, Isa.SME2)

    @property
    def has_sme2(self) -> bool:
        return self.isa is Isa.SME2

    def csv_row(self, model_id: str) -> dict[str, str | int | bool]:
        """This kernel as a row of the reference kit's ``kernels.csv`` (``category``: the kind)."""
        return {
            "model_id": model_id,
            "kernel_name": readable(self.name),
            "category": self.kind,
            "count": self.count,
            "dtype": self.dtype,
            "xnn_op": self.xnn_op,
            "variant": self.variant,
            "ukernel_shape": self.ukernel_shape,
            "arch_chain": self.arch_chain,
            "has_sme": self.has_sme,
            "has_sme2": self.has_sme2,
        }


def describe_kernel(name: str, kind: str = "", count: int = 1) -> KernelUse:
    """Split an XNNPACK microkernel or a KleidiAI routine name into its parts (other names keep
    only name and ISA).

    XNNPACK: the dtypes are the leading words that look like dtypes (``f32``, ``pf16``,
    ``qc8w``), the operator the next word, the variant the rest before ``ukernel``. KleidiAI
    (:func:`_describe_kleidiai`) names the same parts in another order.
    """
    dtype = xnn_op = variant = shape = arch = ""
    if match := _KAI_NAME.match(name):
        dtype, xnn_op, variant, shape, arch = _describe_kleidiai(match["rest"])
    elif match := _XNN_NAME.match(name):
        head = match["head"].split("_")
        at = next((i for i, word in enumerate(head) if not _DTYPE_WORD.match(word)), len(head))
        dtype, op_and_variant = "_".join(head[:at]), head[at:]
        xnn_op, variant = (
            (op_and_variant[0], "_".join(op_and_variant[1:])) if op_and_variant else ("", "")
        )
        shape, arch = match["shape"] or "", match["arch"] or ""
        tile, _, rest = arch.partition("_")
        if not shape and _TILE.match(tile):  # transposes: xnn_x32_transposec_ukernel__4x4_...
            shape, arch = tile, rest
    return KernelUse(
        name=name,
        kind=kind,
        count=count,
        dtype=dtype,
        xnn_op=xnn_op,
        variant=variant,
        ukernel_shape=shape,
        arch_chain=arch,
        isa=kernel_isa(name),
    )


def _describe_kleidiai(rest: str) -> tuple[str, str, str, str, str]:
    """(dtype, op, variant, shape, arch) of a KleidiAI name less its ``kai_run_``/``kai_kernel_``.

    ``matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa``: op ``matmul``, variant
    ``clamp``, dtypes (output, LHS, RHS) ``f32_qai8dxp1vlx4_qsi8cxp4vlx4``, tile ``1vlx4vl``,
    arch ``sme2_mopa``. Packing, ``lhs_imatmul_pack_x32p2vlx1_x32p_sme`` or
    ``rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme``: op the words up to ``pack``, variant the
    layout (``kxn``/``nxk``), then dtypes and arch.
    """
    arch = ""
    if found := _KAI_ARCH.search(rest):
        arch, rest = found["arch"], rest[: found.start()]
    words = rest.split("_")
    if "pack" in words:
        at = words.index("pack") + 1
        op, variant = "_".join(words[:at]), ""
        words = words[at:]
        if words[:1] and words[0] in _KAI_LAYOUTS:
            variant, words = words[0], words[1:]
    else:
        op, variant, words = words[0], "_".join(words[1:2]), words[2:]
    shape = words.pop() if words and words[-1][:1].isdigit() else ""
    return "_".join(words), op, variant, shape, arch


def unnamed_code(library: str) -> str:
    """The ``interval_functions`` key of code no symbol names, in ``library`` (``[libc.so.6]``;
    ``[main]`` for code qemu has no name for: ``qemu_log.UNMAPPED``).

    Why: the wheels' libraries are stripped to their exported symbols, so XNNPACK's hidden
    microkernels have no name; counted under their library they keep every interval's
    functions summing exactly to its instructions."""
    return f"[{library or 'main'}]"


def is_unnamed_code(function: str) -> bool:
    """Whether an ``interval_functions`` key is :func:`unnamed_code` rather than a symbol."""
    return function.startswith("[") and function.endswith("]")


#: Longest a readable symbol grows before its middle is elided.
READABLE_LENGTH = 120


def readable(symbol: str) -> str:
    """``symbol`` as a person reads it: a C++ name demangled (by libstdc++'s own demangler, through
    the ``cxxfilt`` package), its template arguments and parameter lists shortened to ``<…>`` and
    ``(…)`` where they would hide the function's name, e.g.
    ``_ZN5torch8executor13repeat_tensorERKN10…`` → ``torch::executor::repeat_tensor(…)``. C names
    (XNNPACK's ``xnn_…``, KleidiAI's ``kai_…``) and :func:`unnamed_code` keys are returned as
    they are. Only for display: gates, baselines and stored counts keep the symbol itself."""
    if not symbol.startswith("_Z"):
        return symbol
    import cxxfilt  # deferred: only reports of C++ symbols need it

    try:
        name = cxxfilt.demangle(symbol)
    except cxxfilt.Error:  # not a valid mangled name after all: show it as it is
        return symbol
    name = _elide_nested(_elide_nested(name, "<", ">", "<…>"), "(", ")", "(…)")
    if len(name) > READABLE_LENGTH:
        half = (READABLE_LENGTH - 1) // 2
        name = f"{name[:half]}…{name[-half:]}"
    return name


def _elide_nested(text: str, open_: str, close: str, elided: str) -> str:
    """``text`` with every outermost non-empty ``open_ … close`` group replaced by ``elided``
    (``operator()`` and ``operator<`` keep their own brackets)."""
    out, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == open_ and not text[:index].endswith("operator"):
            if depth == 0:
                out.append(text[start:index])
                start = index
            depth += 1
        elif char == close and depth:
            depth -= 1
            if depth == 0:
                out.append(elided if index > start + 1 else text[start : index + 1])
                start = index + 1
    out.append(text[start:])
    return "".join(out)
