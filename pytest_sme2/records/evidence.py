"""What a run shows of SME2 beyond operator names: what the runner process saw of the CPU
(:class:`CpuSeen`, which proves a run's label) and what the device saw execute — kernels,
instruction counts, the counted inference's instruction trace (:class:`Sme2Evidence`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.kernel_names import ExecutedKernel
from pytest_sme2.analysis.trace import Trace


@dataclass(frozen=True)
class Sme2Evidence:
    """What a device can show beyond operator names about one variant's execution.

    Names prove SME for fp32/fp16/static int8 (``PF32``/``PF16``/``PQS8``) but not for dynamic
    int8, whose ``QP8`` GEMMs look the same on NEON. Executed kernel symbols and instruction counts
    (qemu's execution log) or the XNNPACK kernel log (Debug runners) do. Counts are per inference.
    """

    instructions: int | None = None
    sme_instructions: int | None = None
    #: executed kernels whose name says SME2 (``kai_*_sme2_*``, ``xnn_*__neonsme2``)
    sme2_kernels: tuple[str, ...] = ()
    #: executed SME1-only kernels (``*_sme_*``, ``__neonsme``): SME without SME2
    sme_kernels: tuple[str, ...] = ()
    #: where the evidence comes from, for reports: "qemu exec log", "XNNPACK kernel log", …
    source: str = ""
    #: the counted inference's ETDump run timed in instructions (1 "ns" = 1 instruction), where
    #: the device can split its count between events (:mod:`pytest_sme2.analysis.attribution`)
    instruction_trace: Trace | None = None
    #: every microkernel and packing routine that ran (the kernel log's, or the counted
    #: inference's executed ones), for ``kernels.csv``
    kernels: tuple[ExecutedKernel, ...] = ()
    #: per operator event of the counted inference, the functions that executed in it and their
    #: instructions (qemu-sme2: :func:`pytest_sme2.analysis.attribution.operator_kernels`)
    operator_kernels: tuple[OperatorKernels, ...] = ()
    #: instructions of the method's one-time init (``Method::init``: memory plan, delegate init,
    #: where XNNPACK and KleidiAI pack the weights), where the device counts them
    init_instructions: int | None = None
    #: where the counts were read back from a stored counted run rather than counted in this
    #: session, when that run was counted (:mod:`pytest_sme2.devices.stored_counts`); else ""
    stored_count_at: str = ""
    #: SME instructions per function of the counted inference (those with any), where the device
    #: counts them: what splits an operator's instructions into SME and other
    #: (:mod:`pytest_sme2.analysis.efficiency`)
    sme_functions: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CpuSeen:
    """What one runner process saw of the CPU (the runner's ``cpu_seen``): SME and SME2 as the
    platform answers the kernels' own question (``getauxval(AT_HWCAP2)`` on Linux and Android,
    ``sysctl hw.optional.arm.FEAT_SME*`` on macOS, through any shim the variant runs under), the
    streaming vector length where SME is visible, and whether its XNNPACK exports KleidiAI's SME2
    kernels. What proves a run's sme2-on/off label, rather than what was asked for."""

    source: str
    sme: bool
    sme2: bool
    svl_bytes: int | None
    xnnpack_sme2_kernels: bool

    @classmethod
    def from_timings(cls, timings: Mapping[str, Any]) -> CpuSeen | None:
        """From a timings file; None where the runner said nothing (built before it did, or
        elsewhere: ``--sme2-runner-on``)."""
        seen = timings.get("cpu_seen")
        if seen is None:
            return None
        svl = seen["svl_bytes"]
        return cls(
            str(seen["source"]),
            bool(seen["sme"]),
            bool(seen["sme2"]),
            None if svl is None else int(svl),
            bool(seen["xnnpack_sme2_kernels"]),
        )

    def describe(self) -> str:
        """``SME2 (SVL 64 B); XNNPACK with SME2 kernels`` — what a report's metadata says."""
        if self.sme2:
            seen = "SME2" + (f" (SVL {self.svl_bytes} B)" if self.svl_bytes else "")
        else:
            seen = "SME, not SME2" if self.sme else "no SME"
        kernels = "with" if self.xnnpack_sme2_kernels else "without"
        return f"{seen}; XNNPACK {kernels} SME2 kernels"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
