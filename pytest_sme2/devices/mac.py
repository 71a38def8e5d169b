"""``mac``: Apple Silicon. The runner built on the Mac against the macOS arm64 wheel, SME2-off by
hiding SME from the *same* binary.

macOS tells programs about SME through ``sysctlbyname("hw.optional.arm.FEAT_SME"/"FEAT_SME2")``,
and that is what cpuinfo (hence XNNPACK) asks. ``shim/mac_hide_sme.c``, compiled here into a
dylib and inserted with ``DYLD_INSERT_LIBRARIES``, answers 0 for those keys, so SME2-off differs
from SME2-on only in what the CPU is said to have. A pair of runners built with and without the
SME kernels (``--sme2-runner-on/--sme2-runner-off``, e.g. the reference workflow's presets) is
the alternative; such builds usually differ in more than SME2. Every variant is verified at
prepare time with a probe that reads the two keys as the runner would.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pytest_sme2.cache import cache_root, cached_dir, content_key
from pytest_sme2.devices.base import Device, OptionGetter, RunRequest
from pytest_sme2.devices.host import software_class, software_fingerprint
from pytest_sme2.devices.kernel_log import KernelLogs
from pytest_sme2.devices.runner_pair import RUNNER_SPEC_KEYS, add_runner_options
from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.evidence import Sme2Evidence
from pytest_sme2.runner.build import build_runner
from pytest_sme2.runner.invoke import ANSWER_TIMEOUT_S, Launch, RunResult, run_runner, run_step
from pytest_sme2.runner.kernel_libraries import refuse_without_kernels

SHIM_SOURCE = Path(__file__).resolve().parent / "shim" / "mac_hide_sme.c"
SME_KEYS = ("hw.optional.arm.FEAT_SME", "hw.optional.arm.FEAT_SME2")
#: sysctl keys of the fingerprint, and what they are called there
SYSCTL_KEYS: Mapping[str, str] = {
    "machdep.cpu.brand_string": "chip",
    "hw.model": "model",
    "kern.osproductversion": "macos",
    "hw.perflevel0.physicalcpu": "performance_cores",
    "hw.perflevel1.physicalcpu": "efficiency_cores",
    "hw.ncpu": "cores",
    "hw.optional.arm.FEAT_SME": "FEAT_SME",
    "hw.optional.arm.FEAT_SME2": "FEAT_SME2",
}
# Prints what cpuinfo would learn: FEAT_SME and FEAT_SME2 as sysctlbyname answers them.
_PROBE_SOURCE = """\
#include <stdio.h>
#include <sys/sysctl.h>
static int feature(const char *name) {
    int value = 0;
    size_t size = sizeof value;
    return sysctlbyname(name, &value, &size, NULL, 0) == 0 ? value : 0;
}
int main(void) {
    printf("%d %d\\n", feature("hw.optional.arm.FEAT_SME"), feature("hw.optional.arm.FEAT_SME2"));
    return 0;
}
"""
DYLD_INSERT = "DYLD_INSERT_LIBRARIES"
#: The fingerprint names that make a Mac's machine class: the chip, the model and its cores, and
#: SME. The macOS version is a note.
MAC_CLASS_KEYS = frozenset(
    {"chip", "model", "performance_cores", "efficiency_cores", "cores", "FEAT_SME", "FEAT_SME2"}
)


@dataclass(frozen=True)
class MacFacts:
    """What ``sysctl`` says about a Mac (fingerprint names -> values)."""

    values: Mapping[str, str]

    @property
    def has_sme2(self) -> bool:
        return self.values.get("FEAT_SME2") == "1"

    @property
    def label(self) -> str:
        chip, model = self.values.get("chip", "Mac"), self.values.get("model", "")
        return f"{chip} ({model})" if model else chip


def parse_sysctl(text: str) -> MacFacts:
    """Parse ``sysctl KEY...`` output (``key: value`` lines) for :data:`SYSCTL_KEYS`.

    A key the running macOS does not know (``FEAT_SME2`` before macOS 15, ``perflevel`` on
    Intel) is simply absent: sysctl reports it on stderr and goes on.
    """
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in SYSCTL_KEYS:
            values[SYSCTL_KEYS[key.strip()]] = value.strip()
    return MacFacts(values)


def variant_environment(variant: Variant, shim: Path | None) -> dict[str, str]:
    """Environment additions for a variant: the SME-hiding dylib for SME2-off with the shim."""
    return {DYLD_INSERT: str(shim)} if variant is Variant.OFF and shim is not None else {}


def shim_compile_command(cc: str, source: Path, out: Path) -> list[str]:
    """Compile ``mac_hide_sme.c`` into the dylib ``DYLD_INSERT_LIBRARIES`` loads."""
    return [cc, "-O2", "-Wall", "-Wextra", "-Werror", "-dynamiclib", "-o", str(out), str(source)]


def _on_a_mac() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


class MacDevice(Device):
    """Runs the runner as a local process on an Apple Silicon Mac."""

    name = "mac"
    runs_locally = True

    def __init__(self, runner_on: Path | None = None, runner_off: Path | None = None) -> None:
        self.runner_on = runner_on
        self.runner_off = runner_off
        self._facts: MacFacts | None = None
        self._runners: dict[Variant, Path] = {}
        self._shim: Path | None = None
        self._kernels = KernelLogs("XNNPACK kernel log")

    spec_keys: ClassVar[Mapping[str, str]] = RUNNER_SPEC_KEYS

    @classmethod
    def add_options(cls, add: Callable[..., None]) -> None:
        add_runner_options(add)

    @classmethod
    def from_options(cls, get: OptionGetter) -> MacDevice:
        on, off = get("sme2_runner_on"), get("sme2_runner_off")
        return cls(
            runner_on=Path(on).expanduser() if on else None,
            runner_off=Path(off).expanduser() if off else None,
        )

    def prepare(self) -> None:
        if self._facts is not None:
            return
        if not _on_a_mac():
            raise ConfigError(
                f"the mac device runs on macOS on Apple Silicon, and this is {platform.system()} "
                f"{platform.machine()}: use --sme2-device=qemu-sme2 to emulate SME2 here"
            )
        facts = parse_sysctl(_sysctl(*SYSCTL_KEYS))
        on = self.runner_on or build_runner("host")
        for option, path in (("on", self.runner_on), ("off", self.runner_off)):
            if path is not None and not path.is_file():
                raise ConfigError(f"--sme2-runner-{option}={path}: no such file")
        if not facts.has_sme2:
            self._runners = {Variant.OFF: self.runner_off or on}
        else:
            self._runners = {Variant.ON: on, Variant.OFF: self.runner_off or on}
            if self.runner_off is None:
                self._shim, probe = _build_tools()
                _verify_hiding(probe, self._shim)
        self._facts = facts

    def _prepared(self) -> MacFacts:
        self.prepare()
        assert self._facts is not None
        return self._facts

    def describe(self) -> DeviceInfo:
        facts = self._prepared()
        machine_class = {
            **{k: v for k, v in facts.values.items() if k in MAC_CLASS_KEYS},
            **software_class(),
        }
        fingerprint = {
            **facts.values,
            "runner_on": self._runners.get(Variant.ON, Path()).name,
            "sme2_off": "runner pair" if self.runner_off else "mac_hide_sme.dylib",
            **software_fingerprint(),
        }
        limits = {}
        if not facts.has_sme2:
            reason = f"{facts.label} has no SME2 (sysctl hw.optional.arm.FEAT_SME2 is not 1)"
            limits = {"speedup": reason, "sme2": reason}
        return DeviceInfo(
            name=self.label,
            fingerprint=fingerprint,
            machine_class=machine_class,
            has_sme2=facts.has_sme2,
            variants=tuple(v for v in (Variant.ON, Variant.OFF) if v in self._runners),
            time_meaningful=True,
            limits=limits,
        )

    def run(self, request: RunRequest) -> RunResult:
        self._prepared()
        variant = request.variant
        runner = self._runners.get(variant)
        if runner is None:
            raise RunnerError(f"the mac device cannot run {variant} (its CPU has no SME2)")
        if self.runner_on is None:
            refuse_without_kernels(request.program, self.label, "macOS")
        env = variant_environment(variant, self._shim)  # no shim with a runner pair
        result = run_runner(runner, request, Launch(env=env))
        self._kernels.add(request.program, variant, result.log.splitlines())
        return result

    def evidence(self, request: RunRequest) -> Sme2Evidence | None:
        """Kernels named in the runs' XNNPACK log lines (Debug runners only), else None: no run
        of its own."""
        return self._kernels.evidence(request.program, request.variant)


#: Compiling the dylib or the probe (one small C file each), and running the probe (at once).
_COMPILE_TIMEOUT_S = 120
_PROBE_TIMEOUT_S = 30


def _sysctl(*keys: str) -> str:
    """``sysctl KEY...``'s stdout; unknown keys are left out (sysctl exits 1 for them)."""
    return run_step(["sysctl", *keys], "sysctl", timeout_s=ANSWER_TIMEOUT_S).stdout


def _build_tools() -> tuple[Path, Path]:
    """The SME-hiding dylib and the sysctl probe, compiled with the Mac's ``cc`` once, cached."""
    version = run_step(["cc", "--version"], "cc --version", timeout_s=ANSWER_TIMEOUT_S).stdout

    def build(out: Path) -> None:
        probe_source = out / "sme_probe.c"
        probe_source.write_text(_PROBE_SOURCE)
        for command in (
            shim_compile_command("cc", SHIM_SOURCE, out / "mac_hide_sme.dylib"),
            ["cc", "-O2", "-Wall", "-o", str(out / "sme_probe"), str(probe_source)],
        ):
            what = f"compiling {command[-1]}"
            result = run_step(command, what, timeout_s=_COMPILE_TIMEOUT_S)
            if result.returncode != 0:
                raise RunnerError(
                    f"{what} failed (exit {result.returncode}): "
                    f"{result.stderr.strip()[-300:]}; is Xcode's command line tools installed "
                    "(xcode-select --install)?"
                )

    key = content_key(SHIM_SOURCE.read_bytes(), _PROBE_SOURCE, version)
    entry = cached_dir(cache_root() / "mac" / f"tools-{key}", build)
    return entry / "mac_hide_sme.dylib", entry / "sme_probe"


def _verify_hiding(probe: Path, shim: Path) -> None:
    """The probe must see SME and SME2 plainly and neither with the dylib inserted."""

    def probe_says(env: dict[str, str]) -> str:
        probed = run_step(
            [str(probe)], "the SME probe", timeout_s=_PROBE_TIMEOUT_S, env={**os.environ, **env}
        )
        return probed.stdout.strip()

    plain, hidden = probe_says({}), probe_says({DYLD_INSERT: str(shim)})
    if plain != "1 1" or hidden != "0 0":
        raise RunnerError(
            f"{shim}: FEAT_SME/FEAT_SME2 read {plain!r} plainly and {hidden!r} with the dylib "
            "inserted (expected '1 1' and '0 0'); is DYLD_INSERT_LIBRARIES stripped (SIP)?"
        )
