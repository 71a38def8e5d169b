"""Which microkernels XNNPACK chose, from a Debug runner's log, and what each name says.

Why: operator names cannot prove SME2 for dynamic int8 nor tell SME1 from SME2; kernel names can.
Debug builds of XNNPACK log each microkernel once per process when its config is initialised::

    Note (XNNPACK): Using gemm microkernel 'xnn_pf16_gemm_minmax_ukernel_32x32c2__neonsme2'.

on stderr, or through Android's log with the tag ``XNNPACK`` (``adb logcat -d -s XNNPACK``)::

    03-14 10:22:01.123  4242  4242 I XNNPACK : Using igemm microkernel 'xnn_f32_igemm_...'.

Release builds (the wheels) log nothing, so an empty result means "no evidence", not "no SME2".
The name classification (:func:`kernel_isa`) also serves KleidiAI symbols seen executing under
emulation (``kai_kernel_matmul_..._sme2_mopa``). No device, no subprocess: a device that runs a
Debug runner (android, mac) hands each run's log lines to its :class:`KernelLogs`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.kernel_names import (
    ExecutedKernel,
    Isa,
    KernelUse,
    describe_kernel,
    kernel_isa,
)
from pytest_sme2.analysis.trace import Trace
from pytest_sme2.records.device import Variant
from pytest_sme2.records.evidence import Sme2Evidence

_USING = re.compile(r"Using (\w+) microkernel '(\w+)'")


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


class KernelLogs:
    """The kernels a device's Debug runner logged, per (program, variant), merged over every
    process that ran it (:func:`logged_kernels`): a device's ``run`` adds each run's log lines,
    its ``evidence`` reads them back, since the runs are where the log is."""

    def __init__(self, source: str) -> None:
        """``source`` names where the lines come from, in the evidence ("XNNPACK kernel log")."""
        self.source = source
        self._kernels: dict[tuple[Path, Variant], dict[str, ExecutedKernel]] = {}

    def add(self, model: Path, variant: Variant, lines: Iterable[str]) -> None:
        """One run's log lines (a whole runner log or logcat dump: other lines are ignored)."""
        key = (model, variant)
        self._kernels[key] = logged_kernels(self._kernels.get(key, {}), parse_kernel_log(lines))

    def evidence(self, model: Path, variant: Variant) -> Sme2Evidence | None:
        """Kernels named in the runs' XNNPACK log lines (Debug runners only), else None."""
        kernels = self._kernels.get((model, variant))
        if not kernels:
            return None
        return kernel_evidence(kernels, source=self.source, executed=tuple(kernels.values()))
