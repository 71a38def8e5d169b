"""The machine pytest runs on. On x86-64 (CI, developer machines) there is no SME2: it runs the
SME2-off variant only, and its latency and category gates still hold."""

from __future__ import annotations

import os
import platform
from functools import cache
from importlib import metadata
from pathlib import Path

from pytest_sme2.devices.base import Device, OptionGetter, RunRequest
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.runner.build import build_runner
from pytest_sme2.runner.invoke import Launch, RunResult, run_runner
from pytest_sme2.runner.kernel_libraries import host_custom_kernels, libraries_for


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Hardware", "CPU part"):
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: CPU features XNNPACK (through cpuinfo) picks kernels by, as /proc/cpuinfo names them: x86
#: ``flags`` and Arm ``Features``. Two CPUs that differ in one of these run different kernels, so
#: they are different machine classes; the other flags (mitigations, virtualisation) are not.
XNNPACK_ISA_FEATURES = frozenset(
    {
        # x86-64
        "sse4_1", "avx", "f16c", "fma", "avx2",
        "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512vbmi", "avx512_vnni",
        "avx512_bf16", "avx512_fp16", "avx_vnni", "avx_vnni_int8",
        "amx_tile", "amx_int8", "amx_bf16", "amx_fp16",
        # Arm
        "asimd", "fphp", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2",
        "sme", "sme2", "sme2p1", "smef16f16",
    }
)  # fmt: skip


def cpu_id() -> str:
    """The CPU's identity in numbers: x86 vendor, family and model; Arm implementer and part.

    Virtual machines often hide the marketing name ("AMD EPYC" for Zen 2, 3 and 4 alike), while
    family and model still tell the microarchitecture, and with it the speed of every kernel.
    """
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return ""
    keys = ("vendor_id", "cpu family", "model", "CPU implementer", "CPU architecture", "CPU part")
    return " ".join(f"{k} {fields[k]}" for k in keys if fields.get(k))


def isa_features(flags: set[str]) -> str:
    """The XNNPACK-relevant subset of ``flags``, sorted and space-separated ("" if none)."""
    return " ".join(sorted(flags & XNNPACK_ISA_FEATURES))


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (``flags`` on x86, ``Features`` on Arm)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                return set(value.split())
    except OSError:
        pass
    return set()


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


@cache
def software_class() -> dict[str, str]:
    """Versions that change what a model computes and how fast: part of every machine class."""
    return {"executorch": _version("executorch"), "torch": _version("torch")}


def software_fingerprint() -> dict[str, str]:
    """:func:`software_class` plus the Python version (a note: it does not run the model)."""
    return {**software_class(), "python": platform.python_version()}


class HostDevice(Device):
    """Runs the native runner as a local process."""

    name = "host"
    runs_locally = True

    def __init__(self) -> None:
        self._binary: Path | None = None

    @classmethod
    def from_options(cls, get: OptionGetter) -> HostDevice:
        return cls()

    def prepare(self) -> None:
        if self._binary is None:
            self._binary = build_runner("host")

    def describe(self) -> DeviceInfo:
        flags = cpu_flags()
        has_sme2 = "sme2" in flags
        machine_class = {
            "cpu": cpu_model(),
            "cpu_id": cpu_id(),
            "machine": platform.machine(),
            "cores": str(os.cpu_count()),
            "isa": isa_features(flags),
            **software_class(),
        }
        fingerprint = {
            **machine_class,
            "os": f"{platform.system()} {platform.release()}",
            **software_fingerprint(),
            "runner": self._binary.parent.name if self._binary else "not built",
        }
        if has_sme2:
            # The same binary with SME2 hidden needs the getauxval shim; the qemu-sme2 and
            # android devices do that. The host simply runs with what it has.
            limits = {"speedup": "the host device runs SME2-on only; use qemu-sme2 or android"}
            variants: tuple[Variant, ...] = (Variant.ON,)
        else:
            reason = f"host CPU ({fingerprint['cpu']}, {platform.machine()}) has no SME2"
            limits = {"speedup": reason, "sme2": reason}
            variants = (Variant.OFF,)
        return DeviceInfo(
            name=self.label,
            fingerprint=fingerprint,
            has_sme2=has_sme2,
            variants=variants,
            time_meaningful=True,
            limits=limits,
            machine_class=machine_class,
        )

    def run(self, request: RunRequest) -> RunResult:
        self.prepare()
        assert self._binary is not None
        # llama:: operators: ExecuTorch's LLM custom kernels
        libraries = libraries_for(request.program, host_custom_kernels)
        return run_runner(self._binary, request, Launch(libraries=libraries))
