"""The one interface every device implements, and what a device says about itself.

A device knows how to make the runner available where models run (``prepare``), how to run one
variant of an exported model (``run``), and what it can prove (``info``): whether it has SME2,
whether it can switch SME2 off, whether its wall-clock time means anything. The plugin asks, and
skips with the device's own reason whatever the device cannot measure.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.kernel_names import ExecutedKernel
from pytest_sme2.analysis.trace import Trace
from pytest_sme2.runner.invoke import RunPlan, RunResult


class Variant(enum.StrEnum):
    """The two ways a model runs: with SME2 kernels available to XNNPACK, and without."""

    ON = "sme2-on"
    OFF = "sme2-off"


@dataclass(frozen=True)
class DeviceInfo:
    """What a device is (fingerprint, machine class) and what it can prove.

    ``fingerprint`` is everything the device says about itself. ``machine_class`` is the part of it
    that changes performance — the CPU model, core count, the ISA features XNNPACK dispatches on,
    the chip or SoC, the torch and executorch versions — and decides which stored time record
    (latency, shares, speedup) a measurement is judged against. The rest (kernel patch release,
    hostname, Python patch version, runner build) are *notes*: recorded beside the times and shown
    when they change, never a reason to stop judging.

    ``variants`` are the variants it can run, SME2-on first. A device without SME2 runs only
    SME2-off; ``limits`` maps a gate family ("speedup", "sme2", "latency") to the reason the device
    cannot measure it, which becomes the skip reason.
    """

    name: str
    fingerprint: Mapping[str, str]
    has_sme2: bool
    variants: tuple[Variant, ...]
    time_meaningful: bool
    limits: Mapping[str, str] = field(default_factory=dict)
    machine_class: Mapping[str, str] = field(default_factory=dict)

    @property
    def notes(self) -> dict[str, str]:
        """The fingerprint less the machine class: context for a time record, not its identity."""
        return {k: v for k, v in self.fingerprint.items() if k not in self.machine_class}

    @property
    def class_id(self) -> str:
        """The machine class's name in baseline files: readable slug, then an exact hash."""
        return machine_class_id(self.machine_class)


#: Keys whose value names the hardware best, in order of preference, for a class id's slug.
_SLUG_KEYS = ("cpu", "chip", "model", "soc")


def machine_class_id(machine_class: Mapping[str, str]) -> str:
    """``amd-epyc-2c-1a2b3c4d``: the CPU (or chip, or phone model), the core count, and a hash of
    the whole class, so two classes that differ only in an ISA feature or a version never share a
    record while ``git diff baselines/`` still reads which machine a record belongs to."""
    name = next((machine_class[k] for k in _SLUG_KEYS if machine_class.get(k)), "machine")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:32].strip("-")
    cores = f"-{machine_class['cores']}c" if machine_class.get("cores") else ""
    digest = hashlib.sha256(json.dumps(dict(machine_class), sort_keys=True).encode()).hexdigest()
    return f"{slug}{cores}-{digest[:8]}"


_UNSAFE_IN_FILE_NAMES = re.compile(r"[^A-Za-z0-9._=@-]+")


def device_file_name(name: str) -> str:
    """A device's name (``qemu-sme2:vl=32``) as a file or folder name: ``qemu-sme2@vl=32``, with
    anything but letters, digits and ``._=@-`` as ``_`` (a colon is not allowed in a Windows path,
    a slash of a value such as ``adb=/opt/adb`` would nest folders)."""
    return _UNSAFE_IN_FILE_NAMES.sub("_", name.replace(":", "@"))


def describe_class(machine_class: Mapping[str, str]) -> str:
    """One line naming a machine class for people: ``cpu: AMD EPYC, cores: 2, isa: avx2 fma``."""
    return ", ".join(f"{k}: {v}" for k, v in sorted(machine_class.items()))


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
    #: session, when that run was counted (:mod:`pytest_sme2.run.devices.stored_counts`); else ""
    stored_count_at: str = ""


OptionGetter = Callable[[str], Any]


class CountedRun(NamedTuple):
    """A traced run whose last execution the device counted (:meth:`Device.counted_run`)."""

    run: RunResult
    #: the counted execution's evidence: its instruction trace, kernels, and the init's count
    evidence: Sme2Evidence


#: The executions of an evidence or counted run at most: a warm-up and the counted inference.
EVIDENCE_EXECUTIONS = 2


class Device(ABC):
    """Base class of devices. Subclasses are registered in ``pytest_sme2.run.devices.registry``."""

    #: The value of ``--sme2-device`` selecting this device, and its baseline directory name.
    name: ClassVar[str]
    #: Whether this device emulates the CPU: models are then built with their emulation params
    #: (smaller inputs, see ``pytest_sme2.export.registry``). Known before ``prepare``, at
    #: collection.
    emulates_cpu: ClassVar[bool] = False
    #: The keys a device spec (``KIND:KEY=VALUE``) takes, each naming one of the device's option
    #: dests (``{"vl": "sme2_qemu_vl"}``); see :mod:`pytest_sme2.run.devices.spec`.
    spec_keys: ClassVar[Mapping[str, str]] = {}
    #: Whether the runner runs on this machine, whose load is then read while it measures
    #: (:func:`pytest_sme2.run.disturbance.local_load`); a remote device's load is "unknown".
    runs_locally: ClassVar[bool] = False

    #: The device's spec in a fleet (``qemu-sme2:vl=32``), set by
    #: :class:`pytest_sme2.run.fleet.Fleet`: two devices of one kind must not share a name in
    #: reports and failure sentences.
    spec_id: str | None = None

    @property
    def label(self) -> str:
        """The device's name for people and baselines (``DeviceInfo.name``): its spec, else its
        kind."""
        return self.spec_id or self.name

    @classmethod  # noqa: B027  (optional hook: a no-op default on purpose)
    def add_options(cls, add: Callable[..., None]) -> None:
        """Register device-specific ``--sme2-*`` options: ``add(flag, help=..., ...)``.

        Most devices need none, hence a no-op default rather than an abstract method.
        """

    @classmethod
    @abstractmethod
    def from_options(cls, get: OptionGetter) -> Device:
        """Build the device from option values (``get("sme2_adb_serial")`` etc.)."""

    @abstractmethod
    def prepare(self) -> None:
        """Make the runner usable (build, provision, push); idempotent and cached."""

    @abstractmethod
    def info(self) -> DeviceInfo:
        """Fingerprint and capabilities; valid after ``prepare``."""

    @abstractmethod
    def run(
        self,
        model: Path,
        inputs: Path,
        variant: Variant,
        plan: RunPlan,
        workdir: Path,
    ) -> RunResult:
        """Run ``model`` as ``variant`` with ``plan``; results and logs land in ``workdir``."""

    def evidence(
        self,
        model: Path,
        inputs: Path,
        variant: Variant,
        threads: int,
        workdir: Path,
        *,
        timeout_s: float | None = None,
    ) -> Sme2Evidence | None:
        """Kernel/instruction evidence for ``variant``, or None where the device has none.

        ``timeout_s`` is the deadline of a run of :data:`EVIDENCE_EXECUTIONS` executions, the
        most an evidence run makes (None: the device's default). A number, computed by the
        caller (``pytest_sme2.run.measure`` from ``pytest_sme2.run.deadline``): a device knows
        nothing of baselines."""
        return None

    def counted_run(
        self,
        model: Path,
        inputs: Path,
        variant: Variant,
        threads: int,
        workdir: Path,
        *,
        timeout_s: float | None = None,
    ) -> CountedRun | None:
        """One traced run of ``variant`` with its last execution counted, or None where the
        device counts nothing (the default: mac, android and host time their runs instead).
        ``timeout_s`` as for :meth:`evidence`.

        Why one call: where each execution costs seconds (qemu-sme2), the counted run is the
        traced run; its ETDump and outputs serve as the variant's profile, structure and
        parity, so nothing runs twice."""
        return None
