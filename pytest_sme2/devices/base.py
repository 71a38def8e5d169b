"""The one interface every device implements, and what a device says about itself.

A device knows how to make the runner available where models run (``prepare``), how to run one
variant of an exported model (``run``), and what it can prove (``describe``): whether it has SME2,
whether it can switch SME2 off, whether its wall-clock time means anything. The plugin asks
(``info``: what the device says, with what the session's machine-info hooks added), and skips
with the device's own reason whatever the device cannot measure. A kind is registered through the
``pytest_sme2_device_kinds`` hook (:mod:`pytest_sme2.devices.kinds`; docs/extending.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Protocol

from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.evidence import Sme2Evidence
from pytest_sme2.runner.invoke import Executions, RunnerCall, RunResult

OptionGetter = Callable[[str], Any]


class MachineInfo(Protocol):
    """What adds to a prepared device's info: called with the device's name, a copy of its
    fingerprint and one of its machine class, which it updates in place — the session's
    ``pytest_sme2_update_machine_info`` hook (:mod:`pytest_sme2.hookspec`), whose callers pass
    keywords only."""

    def __call__(
        self, *, device: str, fingerprint: dict[str, str], machine_class: dict[str, str]
    ) -> None: ...


@dataclass(frozen=True, kw_only=True)
class RunRequest(RunnerCall):
    """What a device is asked to run: one variant of a program, as a runner process executes it
    (the program, its inputs, its :class:`~pytest_sme2.runner.invoke.Executions` with their
    deadline, the directory its files land in). The runner needs no variant; a device does, to
    run it SME2-on or SME2-off."""

    variant: Variant


class CountedRun(NamedTuple):
    """A traced run whose last execution the device counted (:meth:`Device.counted_run`)."""

    run: RunResult
    #: the counted execution's evidence: its instruction trace, kernels, and the init's count
    evidence: Sme2Evidence


EVIDENCE_WARMUP = 1
"""The executions of an evidence or counted run before the counted one. Why the second: the first
execution of every example, dtype and variant differs from the second
(``benchmarks/warmup_effect.py``, 33 cases). It does one-time set-up outside any operator event
(0.15–3.3 M instructions, most of it in XNNPACK's code; 3 M in the convolutional models), and
inside 3–25 operators per case the first calls bind symbols lazily and take first-call paths:
native kernels by 1.5–89 % (vit_tiny's expand_copy 11.3 k → 1.3 k, tiny_llama_decode's index_put
70 k → 54 k), toy_cnn fp32's first fully connected GEMM 2,956 → 774. From the second execution on,
every operator counts the same (the third equals it). A count of the first would gate a cold
inference's one-time work, not the model's steady state that baselines hold."""
#: The executions of an evidence or counted run: the warm-up and the counted inference.
EVIDENCE_EXECUTIONS = EVIDENCE_WARMUP + 1


def evidence_request(
    program: Path,
    inputs: Path,
    workdir: Path,
    *,
    variant: Variant,
    threads: int = 1,
    timeout_s: float | None = None,
) -> RunRequest:
    """An evidence or counted run of ``variant`` (:meth:`Device.evidence`,
    :meth:`Device.counted_run`): :data:`EVIDENCE_WARMUP` traced warm-up, then the inference that
    is counted, on ``threads``; ``timeout_s`` is the deadline of those
    :data:`EVIDENCE_EXECUTIONS` executions (None: the device's default), computed by the caller
    (:mod:`pytest_sme2.measure.deadline`): a device knows nothing of baselines."""
    executions = Executions(
        runs=1, warmup=EVIDENCE_WARMUP, threads=threads, traced=True, timeout_s=timeout_s
    )
    return RunRequest(program, inputs, executions, workdir, variant=variant)


class Device(ABC):
    """Base class of devices. A subclass is a kind, added through the
    ``pytest_sme2_device_kinds`` hook (the built-in ones by :mod:`pytest_sme2.devices.kinds`)."""

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
    #: What the machine-info hooks added to the fingerprint and the machine class
    #: (:meth:`add_machine_info`); nothing until then.
    _added: tuple[Mapping[str, str], Mapping[str, str]] = ({}, {})

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
    def describe(self) -> DeviceInfo:
        """Fingerprint, machine class and capabilities, as the device finds them; valid after
        ``prepare``."""

    def info(self) -> DeviceInfo:
        """What the device says about itself (:meth:`describe`), with what the machine-info
        hooks added once it was prepared (:meth:`add_machine_info`)."""
        described = self.describe()
        fingerprint, machine_class = self._added
        if not fingerprint and not machine_class:
            return described
        return replace(
            described,
            fingerprint={**described.fingerprint, **fingerprint},
            machine_class={**described.machine_class, **machine_class},
        )

    def add_machine_info(self, update: MachineInfo) -> None:
        """Let ``update`` add to what the prepared device says about itself, before it measures
        anything: a key it adds to the machine class keys a time record of its own (the class's
        id changes) and is in the fingerprint too; a key it adds to the fingerprint alone is a
        note. Called once (the session's :class:`~pytest_sme2.measure.fleet.Fleet`, after
        ``prepare``)."""
        described = self.describe()
        fingerprint, machine_class = dict(described.fingerprint), dict(described.machine_class)
        update(device=self.label, fingerprint=fingerprint, machine_class=machine_class)
        fingerprint.update(machine_class)

        def changed(now: Mapping[str, str], before: Mapping[str, str]) -> dict[str, str]:
            return {key: value for key, value in now.items() if before.get(key) != value}

        self._added = (
            changed(fingerprint, described.fingerprint),
            changed(machine_class, described.machine_class),
        )

    @abstractmethod
    def run(self, request: RunRequest) -> RunResult:
        """Run ``request``'s variant of its program; results and logs land in its work
        directory."""

    def evidence(self, request: RunRequest) -> Sme2Evidence | None:
        """Kernel/instruction evidence for ``request``'s variant, or None where the device has
        none. ``request`` is an :func:`evidence_request`, the most an evidence run makes
        (a device that reads its evidence from the logs of its runs runs nothing)."""
        return None

    def counted_run(self, request: RunRequest) -> CountedRun | None:
        """One traced run of ``request`` (an :func:`evidence_request`) with its last execution
        counted, or None where the device counts nothing (the default: mac, android and host
        time their runs instead).

        Why one call: where each execution costs seconds (qemu-sme2), the counted run is the
        traced run; its ETDump and outputs serve as the variant's profile, structure and
        parity, so nothing runs twice."""
        return None

    def counts_kept(self) -> bool:
        """Whether a counted run of one thread is kept and read back by a later identical one
        (qemu-sme2 with its count store): then a session may count its cases ahead of measuring
        them (:mod:`pytest_sme2.measure.count_ahead`). False by default."""
        return False
