"""Which microkernels XNNPACK chose, from a Debug runner's log, and what each name says.

Why: operator names cannot prove SME2 for dynamic int8 nor tell SME1 from SME2; kernel names can.
Debug builds of XNNPACK log each microkernel once per process when its config is initialised::

    Note (XNNPACK): Using gemm microkernel 'xnn_pf16_gemm_minmax_ukernel_32x32c2__neonsme2'.

on stderr, or through Android's log with the tag ``XNNPACK`` (``adb logcat -d -s XNNPACK``)::

    03-14 10:22:01.123  4242  4242 I XNNPACK : Using igemm microkernel 'xnn_f32_igemm_...'.

Release builds (the wheels) log nothing, so an empty result means "no evidence", not "no SME2".
The name classification (:func:`kernel_isa`) also serves KleidiAI symbols seen executing under
emulation (``kai_kernel_matmul_..._sme2_mopa``). Pure functions: no device, no subprocess.
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pytest_sme2.attribution import OperatorKernels
from pytest_sme2.devices.base import ExecutedKernel, Sme2Evidence
from pytest_sme2.trace import Trace

_USING = re.compile(r"Using (\w+) microkernel '(\w+)'")
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
            "kernel_name": self.name,
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


def parse_kernel_log(lines: Iterable[str]) -> tuple[KernelUse, ...]:
    """The microkernels named by ``Using <kind> microkernel '<name>'`` lines, first use first.

    Any prefix is accepted (stderr's ``Note (XNNPACK):``, logcat's time/pid/tag columns); other
    lines are ignored, so a whole runner log or logcat dump can be passed as it is.
    """
    counts: Counter[tuple[str, str]] = Counter()
    for line in lines:
        if match := _USING.search(line):
            counts[(match[2], match[1])] += 1
    return tuple(describe_kernel(name, kind, count) for (name, kind), count in counts.items())


def logged_kernels(
    known: Mapping[str, ExecutedKernel], uses: Iterable[KernelUse]
) -> dict[str, ExecutedKernel]:
    """``known`` kernels (by name) with one more process's log lines ``uses`` added: every
    kernel any run logged, its count the most lines one process logged (the kit's count is
    one run's log; a device runs a case in several processes)."""
    merged = dict(known)
    for use in uses:
        before = merged.get(use.name)
        if before is None or use.count > before.count:
            merged[use.name] = ExecutedKernel(use.name, use.count, kind=use.kind)
    return merged


def kernel_evidence(
    kernels: Iterable[str],
    *,
    source: str,
    instructions: int | None = None,
    sme_instructions: int | None = None,
    instruction_trace: Trace | None = None,
    executed: tuple[ExecutedKernel, ...] = (),
    operator_kernels: tuple[OperatorKernels, ...] = (),
) -> Sme2Evidence:
    """Evidence from kernel names that ran: the SME2 ones, and the SME1-only compute ones (sorted).

    KleidiAI's LHS packing kernels for SME2 GEMMs are named ``..._sme``: they prepare operands and
    say nothing about SME1 vs SME2 compute, so they are in neither list.
    """
    names = sorted(set(kernels))
    return Sme2Evidence(
        instructions=instructions,
        sme_instructions=sme_instructions,
        sme2_kernels=tuple(name for name in names if kernel_isa(name) is Isa.SME2),
        sme_kernels=tuple(
            name
            for name in names
            if kernel_isa(name) is Isa.SME and "pack" not in name.lower().split("_")
        ),
        source=source,
        instruction_trace=instruction_trace,
        kernels=executed,
        operator_kernels=operator_kernels,
    )
