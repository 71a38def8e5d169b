"""``qemu-sme2``: an emulated Armv9 CPU with SME2 on any x86-64 machine (CI runners included).

The aarch64 runner runs under ``qemu-aarch64 -cpu max``; SME2-off is the *same* binary on the same
CPU with ``getauxval`` denying SME (see :mod:`pytest_sme2.devices.provision`), so the only
variable is what XNNPACK is told. Emulated time is no performance signal, so this device proves
what it can instead: packed operator names on vs off, outputs on vs off, and — from qemu's
execution log — guest instructions per inference and the SME2 kernels that executed.

This module is the device: its options, its preparation (provisioning, checking the SME-hiding
shim still hides, building the runner) and what it can prove. What runs the guest is
:mod:`pytest_sme2.devices.qemu_guest`, what counts it :mod:`pytest_sme2.devices.qemu_count`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

from pytest_sme2.devices.base import CountedRun, Device, OptionGetter, RunRequest
from pytest_sme2.devices.host import cpu_model, software_class, software_fingerprint
from pytest_sme2.devices.provision import provision_qemu, read_hwcaps
from pytest_sme2.devices.qemu_count import CountStore, counted_run
from pytest_sme2.devices.qemu_guest import QemuGuest
from pytest_sme2.devices.stored_counts import store_dir
from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.evidence import Sme2Evidence
from pytest_sme2.runner.build import build_runner, executorch_version
from pytest_sme2.runner.invoke import RunResult

SME_VECTOR_LENGTHS = (16, 32, 64)
"""Streaming vector lengths in bytes the wheel's KleidiAI kernels run with (128 crashes them)."""

DEFAULT_SME_VECTOR_LENGTH = 64
"""512-bit, the streaming vector length of Apple M4, rather than qemu's 256-bit default: SME
kernels' instruction counts scale with it, so the ratios should be those of real hardware."""

_NOT_A_SIGNAL = "qemu-sme2 emulates SME2: its time is not a performance signal"


class QemuSme2Device(Device):
    """The runner cross-built for aarch64, run under qemu with SME2 visible or hidden."""

    name = "qemu-sme2"
    emulates_cpu = True

    def __init__(
        self,
        qemu: Path | None = None,
        sme_vector_length: int = DEFAULT_SME_VECTOR_LENGTH,
        *,
        count_store: Path | None = None,
        recount: bool = False,
    ) -> None:
        """``count_store`` keeps every counted run of one thread under its key, and a later run
        of the same key is read back from it unless ``recount``
        (:mod:`pytest_sme2.devices.stored_counts`); the plugin's sessions keep them in the
        cache (``--sme2-recount``: count again and replace)."""
        if sme_vector_length not in SME_VECTOR_LENGTHS:
            raise ConfigError(
                f"--sme2-qemu-vl={sme_vector_length}: the SME vector length must be one of "
                f"{', '.join(map(str, SME_VECTOR_LENGTHS))} (bytes)"
            )
        self.qemu = qemu
        self.sme_vector_length = sme_vector_length
        self.counts = CountStore(count_store, recount)
        self._guest: QemuGuest | None = None

    spec_keys: ClassVar[Mapping[str, str]] = {"qemu": "sme2_qemu", "vl": "sme2_qemu_vl"}

    @classmethod
    def add_options(cls, add: Callable[..., None]) -> None:
        add(
            "--sme2-qemu",
            dest="sme2_qemu",
            default=None,
            help="qemu-sme2: a qemu-aarch64 >= 11 to use instead of fetching one (also $SME2_QEMU)",
        )
        add(
            "--sme2-qemu-vl",
            dest="sme2_qemu_vl",
            default=None,
            help="qemu-sme2: SME streaming vector length in bytes, "
            f"{'|'.join(map(str, SME_VECTOR_LENGTHS))} (default: {DEFAULT_SME_VECTOR_LENGTH})",
        )
        add(
            "--sme2-recount",
            dest="sme2_recount",
            action="store_true",
            default=None,
            help="qemu-sme2: count every variant again rather than read back a stored count of "
            "the same program, inputs, runner, wheel, guest libraries and qemu (and replace it)",
        )

    @classmethod
    def from_options(cls, get: OptionGetter) -> QemuSme2Device:
        qemu = get("sme2_qemu")
        vl = get("sme2_qemu_vl")
        try:
            length = int(vl) if vl is not None else DEFAULT_SME_VECTOR_LENGTH
        except ValueError:
            raise ConfigError(f"--sme2-qemu-vl={vl!r}: expected a number of bytes") from None
        return cls(
            qemu=Path(qemu) if qemu else None,
            sme_vector_length=length,
            count_store=store_dir(),
            recount=bool(get("sme2_recount")),
        )

    def prepare(self) -> None:
        if self._guest is not None:
            return
        toolchain = provision_qemu(qemu=self.qemu)
        # provisioning verified this qemu once; this checks the cached toolchain still holds
        on, off = read_hwcaps(toolchain, sme2=True), read_hwcaps(toolchain, sme2=False)
        if not on.sme2 or off.sme or off.sme2:
            raise RunnerError(
                f"{toolchain.qemu}: sme2-on shows HWCAP2={on.hwcap2:#x}, sme2-off "
                f"HWCAP2={off.hwcap2:#x}; expected SME2 on and no SME off (delete "
                f"{toolchain.shim.parent} to rebuild the shim)"
            )
        binary = build_runner("aarch64", executorch_dir=toolchain.executorch_dir)
        self._guest = QemuGuest(toolchain, binary, self.sme_vector_length)

    @property
    def guest(self) -> QemuGuest:
        """What runs the guest, the device prepared first."""
        self.prepare()
        assert self._guest is not None
        return self._guest

    def describe(self) -> DeviceInfo:
        guest = self.guest
        toolchain, length = guest.toolchain, self.sme_vector_length
        # Emulated time is never judged, so this class keys no time record; it names what the
        # portable evidence (instruction counts, kernels) depends on.
        machine_class = {
            "cpu": f"qemu-aarch64 -cpu max (SME2), SVL {length * 8} bits",
            "qemu": toolchain.qemu_version,
            "sme_vector_length": str(length),
            **software_class(),
            "executorch_aarch64": executorch_version(toolchain.executorch_dir),
        }
        fingerprint = {
            **machine_class,
            "host_cpu": cpu_model(),
            **software_fingerprint(),
            "runner": guest.binary.parent.name,
        }
        return DeviceInfo(
            name=self.label,
            fingerprint=fingerprint,
            machine_class=machine_class,
            has_sme2=True,
            variants=(Variant.ON, Variant.OFF),
            time_meaningful=False,
            limits={
                "speedup": f"{_NOT_A_SIGNAL} (see the instruction ratio)",
                "latency": f"{_NOT_A_SIGNAL}; latency gates need real hardware (mac, android)",
            },
        )

    def run(self, request: RunRequest) -> RunResult:
        return self.guest.run(request)

    def evidence(self, request: RunRequest) -> Sme2Evidence:
        """The evidence of :meth:`counted_run`, for callers that need neither its ETDump nor its
        outputs (``measure`` takes the whole counted run)."""
        return self.counted_run(request).evidence

    def counted_run(self, request: RunRequest) -> CountedRun:
        """The counted run of :func:`pytest_sme2.devices.qemu_count.counted_run`, read back
        from the device's store where an earlier one counted the same."""
        return counted_run(self.guest, request, self.counts)

    def counts_kept(self) -> bool:
        return self.counts.directory is not None and not self.counts.recount
