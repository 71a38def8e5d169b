"""An ETDump event name → its parts: operator, layout, datatypes, microkernel, instance, source.

XNNPACK names its operators ``"<operator type>[ <microkernel type>]"`` and ExecuTorch's XNNPACK
profiler appends `` #<n>`` (a per-delegate-call counter). In the XNNPACK shipped with executorch
1.5.1 the operator type is ``Name (LAYOUT, DT, ...)``, ``Name (LAYOUT)``, ``Name (DT)`` (e.g.
``Pack LH (X32)``) or a bare ``Name`` (``Invalid Unary Op``); the microkernel type is one of
``GEMM``, ``IGEMM``, ``DWConv``, ``Subconv2D``, ``Reduce2``, ``Average Pooling``, ... and is left
out for the default microkernel. Kernels that ExecuTorch runs itself are logged as
``native_call_<aten op>.<overload>`` inside an ``OPERATOR_CALL``.

Classification (``categories``) and SME detection work on these parsed parts, never on
substrings of the raw name: ``Convert`` is not a convolution, ``addmm`` is not an add.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

Source = Literal["xnnpack", "native", "framework", "unknown"]

# XNNPACK's layout tags (first argument in the parentheses when present).
LAYOUTS = frozenset({"NC", "ND", "NCW", "NWC", "NCHW", "NHWC", "NTHC", "NHTC", "NCHW2NHWC"})

# Microkernel types from XNNPACK's microkernel-type table; used only to split a microkernel off
# a name that has no parentheses (with parentheses, whatever follows them is the microkernel).
MICROKERNELS = frozenset(
    {
        "Default",
        "Average Pooling",
        "Conv2D HWC2CHW",
        "DWConv",
        "GEMM",
        "IGEMM",
        "Reduce",
        "Reduce2",
        "Pixelwise Average Pooling",
        "SPMM",
        "Subconv2D",
        "Unpooling",
        "VMulCAddC",
    }
)

# XNNPACK operator types with no parentheses (their ``#n`` may be missing in grouped names).
BARE_OPERATORS = frozenset({"Invalid", "Invalid Unary Op", "Invalid Binary Op"})

# Events that ExecuTorch itself logs around kernels and delegates: wrappers, not operators.
FRAMEWORK_EVENTS = frozenset(
    {
        "Method::execute",
        "Method::init",
        "Method::step",
        "Program::load_method",
        "DELEGATE_CALL",
        "OPERATOR_CALL",
        "MOVE_CALL",
        "FREE_CALL",
        "JF_CALL",
    }
)

# Longest first, so "Pixelwise Average Pooling" is not cut as "... Average Pooling".
_MICROKERNELS_LONGEST_FIRST = sorted(MICROKERNELS, key=len, reverse=True)
# Every pattern here matches in linear time, with few steps per character: no two adjacent parts
# can match the same text (``[^()]*?\s*\(`` could, and took 48 s on a 200 KB name of spaces), and
# repeats are possessive (``*+``) where a give-back could never help. The instance suffix and the
# operator's parentheses are found by ``str`` methods, and only their parts matched.
_INSTANCE_NUMBER = re.compile(r"\d{1,18}")
_ARGS = re.compile(r"[A-Z0-9_]++(?:,\s*+[A-Z0-9_]++)*+")
_NATIVE = re.compile(r"^native_call_(?P<op>[^.\s]+)(?:\.\S*)?$")
#: ``Method::execute``, or upper-case words joined by single underscores ending in ``_CALL``
_WRAPPER = re.compile(r"^(?:[A-Za-z_]\w*+::\w++|[A-Z](?![A-Z0-9_]*?__)[A-Z0-9_]*_CALL)$")


@dataclass(frozen=True, slots=True)
class OpName:
    """The parts of one event name; ``key`` groups instances (the name without `` #n``)."""

    raw: str
    key: str
    operator: str
    layout: str | None
    datatypes: tuple[str, ...]
    microkernel: str | None
    instance: int | None
    source: Source

    @property
    def packed(self) -> bool:
        """True iff a datatype is a packed SME operand type (PF32, PF16, PQS8, ...).

        XNNPACK switches GEMM-like operators to these when the CPU reports SME/SME2, so they are
        the in-trace evidence of SME. ``QP8`` (dynamic int8 packed LHS) is *not* evidence: KleidiAI
        uses it on NEON i8mm/dotprod too.
        """
        return any(_is_packed(dt) for dt in self.datatypes)

    @property
    def unpacked_key(self) -> str:
        """``key`` with SME packing taken out (``PF32`` → ``F32``): the same graph node has the
        same unpacked key in SME2-on and SME2-off traces, although SME2-on renames it."""
        if not self.packed:
            return self.key
        return self._with_datatypes(
            tuple(dt[1:] if _is_packed(dt) else dt for dt in self.datatypes)
        )

    @property
    def portable_key(self) -> str:
        """``key`` as every machine of a device kind names it: datatype spellings that XNNPACK
        picks by the CPU's instructions, not by the graph, are folded (see
        :data:`DISPATCH_SPELLINGS`). SME packing is kept: it is judged on its own."""
        if not any(dt in DISPATCH_SPELLINGS for dt in self.datatypes):
            return self.key
        return self._with_datatypes(tuple(DISPATCH_SPELLINGS.get(dt, dt) for dt in self.datatypes))

    def _with_datatypes(self, datatypes: tuple[str, ...]) -> str:
        inside = ", ".join((self.layout, *datatypes) if self.layout else datatypes)
        return f"{self.operator} ({inside})" + (f" {self.microkernel}" if self.microkernel else "")


#: Datatype spellings that depend on the CPU, not on the program → the spelling they stand for.
#: Dynamically quantized int8 inputs are ``QDU8`` (unsigned) where XNNPACK's kernels use an
#: unsigned-by-signed dot product (x86 AVX-VNNI / AVX512-VNNI) and ``QD8`` elsewhere: seen as
#: ``Fully Connected (NC, QDU8, F32, QC8W) GEMM`` on one AMD EPYC and ``(NC, QD8, F32, QC8W)`` on
#: another, for the same .pte.
DISPATCH_SPELLINGS: dict[str, str] = {"QDU8": "QD8"}


def _is_packed(datatype: str) -> bool:
    return len(datatype) > 2 and datatype[0] == "P" and datatype[1] in "FQB"


@functools.lru_cache(maxsize=1 << 14)
def parse_op_name(name: str) -> OpName:
    """Split an event name into its parts. Never raises: unknown shapes get ``source="unknown"``.

    Cached: a trace repeats a few hundred distinct names hundreds of thousands of times.
    """
    raw = name
    text, instance = _split_instance(name.strip())
    if text in FRAMEWORK_EVENTS or (instance is None and _WRAPPER.match(text)):
        return OpName(raw, text, text, None, (), None, instance, "framework")
    native = _NATIVE.match(text)
    if native and instance is None:
        # Custom-op kernels carry a namespace (``quantized_decomposed::quantize_per_tensor``);
        # aten ones do not: keep the op name alone so both look alike.
        operator = native["op"].rpartition("::")[2] or native["op"]
        return OpName(raw, text, operator, None, (), None, None, "native")
    xnn = _split_xnnpack(text)
    if xnn is not None:
        op, args, microkernel = xnn
        layout = args[0] if args[0] in LAYOUTS else None
        datatypes = args[1:] if layout else args
        return OpName(raw, text, op, layout, datatypes, microkernel, instance, "xnnpack")
    operator, microkernel = _split_microkernel(text)
    if "(" not in text and (instance is not None or operator in BARE_OPERATORS):
        # No parentheses (``Invalid Unary Op #1``): still an XNNPACK operator, as only the
        # XNNPACK profiler numbers its events.
        return OpName(raw, text, operator, None, (), microkernel, instance, "xnnpack")
    whole = name.strip()
    return OpName(raw, whole, whole, None, (), None, None, "unknown")


def _split_instance(text: str) -> tuple[str, int | None]:
    """``"Name (...) GEMM #12"`` → (``"Name (...) GEMM"``, 12): the profiler's instance counter,
    after whitespace, taken off; (text, None) without one."""
    head, hash_sign, number = text.rpartition("#")
    if not hash_sign or not head[-1:].isspace() or not _INSTANCE_NUMBER.fullmatch(number):
        return text, None
    key = head.rstrip()
    return (key, int(number)) if key else (text, None)


def _split_xnnpack(text: str) -> tuple[str, tuple[str, ...], str | None] | None:
    """``"Name (ARG, ARG) Microkernel"`` → (Name, args, Microkernel or None), None for any other
    shape: a non-empty name and a microkernel without parentheses around upper-case arguments."""
    open_at = text.find("(")
    close_at = text.find(")", open_at + 1)
    if open_at < 0 or close_at < 0:
        return None
    op, inside, rest = text[:open_at].rstrip(), text[open_at + 1 : close_at], text[close_at + 1 :]
    if not op or ")" in op or "(" in rest or ")" in rest or not _ARGS.fullmatch(inside):
        return None
    return op, tuple(a.strip() for a in inside.split(",")), rest.lstrip() or None


def _split_microkernel(text: str) -> tuple[str, str | None]:
    """``"Name Microkernel"`` → (Name, Microkernel) for a known microkernel, else (text, None)."""
    for microkernel in _MICROKERNELS_LONGEST_FIRST:
        if text.endswith(" " + microkernel) and len(text) > len(microkernel) + 1:
            return text[: -len(microkernel) - 1].rstrip(), microkernel
    return text, None
