"""The machine pytest runs on. On x86-64 (CI, developer machines) there is no SME2: it runs the
SME2-off variant only, and its latency and category gates still hold."""

from __future__ import annotations

import os
import platform
from functools import cache
from importlib import metadata
from pathlib import Path

from pytest_sme2.devices.base import Device, DeviceInfo, OptionGetter, Variant
from pytest_sme2.runner.build import build_runner
from pytest_sme2.runner.invoke import RunPlan, RunResult, run_runner


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


def _cpu_flags() -> set[str]:
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
def software_fingerprint() -> dict[str, str]:
    """Versions that change what a model computes and how fast: part of every fingerprint."""
    return {
        "executorch": _version("executorch"),
        "torch": _version("torch"),
        "python": platform.python_version(),
    }


class HostDevice(Device):
    """Runs the native runner as a local process."""

    name = "host"

    def __init__(self) -> None:
        self._binary: Path | None = None

    @classmethod
    def from_options(cls, get: OptionGetter) -> HostDevice:
        return cls()

    def prepare(self) -> None:
        if self._binary is None:
            self._binary = build_runner("host")

    def info(self) -> DeviceInfo:
        has_sme2 = "sme2" in _cpu_flags()
        fingerprint = {
            "cpu": cpu_model(),
            "machine": platform.machine(),
            "cores": str(os.cpu_count()),
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
            name=self.name,
            fingerprint=fingerprint,
            has_sme2=has_sme2,
            variants=variants,
            time_meaningful=True,
            limits=limits,
        )

    def run(
        self, model: Path, inputs: Path, variant: Variant, plan: RunPlan, workdir: Path
    ) -> RunResult:
        self.prepare()
        assert self._binary is not None
        return run_runner(self._binary, model, workdir, plan, inputs=inputs)
