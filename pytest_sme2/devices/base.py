"""The one interface every device implements, and what a device says about itself.

A device knows how to make the runner available where models run (``prepare``), how to run one
variant of an exported model (``run``), and what it can prove (``info``): whether it has SME2,
whether it can switch SME2 off, whether its wall-clock time means anything. The plugin asks, and
skips with the device's own reason whatever the device cannot measure.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.evidence import Sme2Evidence
from pytest_sme2.runner.invoke import RunPlan, RunResult

OptionGetter = Callable[[str], Any]


class CountedRun(NamedTuple):
    """A traced run whose last execution the device counted (:meth:`Device.counted_run`)."""

    run: RunResult
    #: the counted execution's evidence: its instruction trace, kernels, and the init's count
    evidence: Sme2Evidence


#: The executions of an evidence or counted run at most: a warm-up and the counted inference.
EVIDENCE_EXECUTIONS = 2


class Device(ABC):
    """Base class of devices. Subclasses are registered in ``pytest_sme2.devices.kinds``."""

    #: The value of ``--sme2-device`` selecting this device, and its baseline directory name.
    name: ClassVar[str]
    #: Whether this device emulates the CPU: models are then built with their emulation params
    #: (smaller inputs, see ``pytest_sme2.export.model_spec``). Known before ``prepare``, at
    #: collection.
    emulates_cpu: ClassVar[bool] = False
    #: The keys a device spec (``KIND:KEY=VALUE``) takes, each naming one of the device's option
    #: dests (``{"vl": "sme2_qemu_vl"}``); see :mod:`pytest_sme2.devices.spec`.
    spec_keys: ClassVar[Mapping[str, str]] = {}
    #: Whether the runner runs on this machine, whose load is then read while it measures
    #: (:func:`pytest_sme2.measure.cpu_load.local_load`); a remote device's load is "unknown".
    runs_locally: ClassVar[bool] = False

    #: The device's spec in a fleet (``qemu-sme2:vl=32``), set by
    #: :class:`pytest_sme2.measure.fleet.Fleet`: two devices of one kind must not share a name in
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
        caller (``pytest_sme2.measure.case`` from ``pytest_sme2.measure.deadline``): a device knows
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
