"""Device specs: ``KIND[:KEY=VALUE…]``, one device of a session's fleet.

``--sme2-device=android:serial=R5CX1234,mac,qemu-sme2:vl=64`` names three devices. A spec's keys
are its device's own options (``serial`` is ``--sme2-adb-serial``, ``vl`` is ``--sme2-qemu-vl``):
a key given in the spec wins for that device, and the flag stays the default for every device of
its kind. Each device class declares its keys (``Device.spec_keys``), so a typo is an error that
lists them rather than an option silently ignored. A kind is looked up in the session's
:class:`~pytest_sme2.devices.kinds.DeviceKinds` (the built-in four and any a plugin adds), once,
when the spec is parsed: a spec holds its kind.

``auto`` (the default) names the devices that show SME2 on this machine (:func:`auto_specs`):
where the CPU has none — every x86 laptop and CI runner, where users meet the plugin first — it is
the host beside the emulated ``qemu-sme2`` for each model's headline dtype, so the first report
already shows SME2-on against SME2-off: instruction ratios, the category shift, the SME2 kernels.
"""

from __future__ import annotations

import platform as platform_module
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_sme2.devices.base import Device, OptionGetter
from pytest_sme2.devices.host import cpu_flags
from pytest_sme2.devices.kinds import DeviceKinds
from pytest_sme2.errors import ConfigError
from pytest_sme2.records.device import device_file_name

#: The device list that stands for the devices showing SME2 on this machine.
AUTO = "auto"

_KEY = re.compile(r"[a-z][a-z0-9-]*")

#: The key every kind takes: the xdist worker (its ``--tx …//id=ID``) that runs the device's cases,
#: a Mac or an SME2 Linux box in the lab (``mac:worker=mini1``). Not a device option: where a
#: device runs is not what it is, so the device is built from its other keys alone and keeps the
#: baselines of its spec without it (:attr:`DeviceSpec.baseline_directory`).
WORKER_KEY = "worker"


@dataclass(frozen=True)
class DeviceSpec:
    """One device: its kind and the options given with it, in order."""

    kind: type[Device]
    options: tuple[tuple[str, str], ...] = ()
    #: each model in its first selected dtype only (``auto``'s emulated device: the evidence in
    #: the first report, at the cost of one case per model)
    headline_only: bool = False
    #: why the fleet has this device when the user did not name it (``auto``'s), "" when named: a
    #: device added so cannot be prepared (no apt to provision qemu) skips its cases, saying so
    added_by: str = ""

    @property
    def id(self) -> str:
        """The spec as written: the device's name in test ids and reports."""
        return ":".join([self.kind.name, *(f"{key}={value}" for key, value in self.options)])

    @property
    def directory(self) -> str:
        """The device's folder under the baseline and artifacts directories: the kind alone for a
        plain spec (where every existing baseline is), else ``KIND@KEY=VALUE…``
        (:func:`~pytest_sme2.records.device.device_file_name`)."""
        return device_file_name(self.id)

    @property
    def worker(self) -> str | None:
        """The xdist worker named to run this device's cases (``worker=ID``), else None: any."""
        return dict(self.options).get(WORKER_KEY)

    @property
    def baseline_directory(self) -> str:
        """The device's folder under the baseline directory: :attr:`directory` without the
        worker — a qemu-sme2 count is the same on any machine, and a Mac's time records are
        kept per machine class already, so a lab worker's baselines are its device's."""
        options = tuple(pair for pair in self.options if pair[0] != WORKER_KEY)
        return DeviceSpec(self.kind, options).directory

    def getter(self, flags: OptionGetter) -> OptionGetter:
        """The device's option getter: a key of this spec wins, else the flag (or ini) value."""
        keys = self.kind.spec_keys
        given = {keys[key]: value for key, value in self.options if key != WORKER_KEY}
        return lambda dest: given[dest] if dest in given else flags(dest)


@dataclass(frozen=True)
class Platform:
    """What ``auto`` asks of a machine: ``platform.system()``, ``platform.machine()`` and the
    CPU's feature flags as Linux lists them."""

    system: str
    machine: str
    flags: frozenset[str] = frozenset()

    @classmethod
    def here(cls) -> Platform:
        """The machine pytest runs on."""
        return cls(platform_module.system(), platform_module.machine(), frozenset(cpu_flags()))


def parse_device_specs(
    text: str,
    kinds: DeviceKinds,
    *,
    source: str = "--sme2-device",
    platform: Platform | None = None,
) -> tuple[DeviceSpec, ...]:
    """The specs of a comma-separated list, each kind one of ``kinds``, ``auto`` expanded for
    ``platform`` (default: this machine; a device also named explicitly is taken as named);
    ConfigError naming ``source`` and what is wrong."""
    specs: list[DeviceSpec] = []
    named: set[str] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise ConfigError(f"{source}={text!r}: an empty device in the list")
        parsed = (
            auto_specs(kinds, platform) if item == AUTO else (_parse_spec(item, kinds, source),)
        )
        for spec in parsed:
            if not spec.added_by:
                if spec.id in named:
                    raise ConfigError(f"{source}: {spec.id!r} is listed twice")
                named.add(spec.id)
            specs.append(spec)
    # ``auto`` once (twice names the host twice): an added device is unique, unless also named
    return tuple(spec for spec in specs if not (spec.added_by and spec.id in named))


def _parse_spec(item: str, kinds: DeviceKinds, source: str) -> DeviceSpec:
    """One ``KIND[:KEY=VALUE…]``."""
    name, *pairs = item.split(":")
    kind = kinds[name]
    keys: Mapping[str, str] = kind.spec_keys
    options: list[tuple[str, str]] = []
    for pair in pairs:
        if "=" not in pair and options:  # a value with a colon: adb's host:port serials
            key, value = options.pop()
            options.append((key, f"{value}:{pair}"))
            continue
        key, sep, value = pair.partition("=")
        if not sep or not _KEY.fullmatch(key) or not value:
            raise ConfigError(f"{source}: {item!r}: expected KIND[:KEY=VALUE…], got {pair!r}")
        if key not in keys and key != WORKER_KEY:
            known = ", ".join(sorted([*keys, WORKER_KEY]))
            raise ConfigError(
                f"{source}: {item!r}: {name} takes no key {key!r} (its keys: {known})"
            )
        if any(key == seen for seen, _ in options):
            raise ConfigError(f"{source}: {item!r}: {key!r} given twice")
        options.append((key, value))
    return DeviceSpec(kind, tuple(options))


def auto_specs(kinds: DeviceKinds, platform: Platform | None = None) -> tuple[DeviceSpec, ...]:
    """``auto`` on ``platform`` (default: this machine): an Apple Silicon Mac measures natively
    (``mac``: SME2-on and off where the chip has SME2); a CPU with SME2 is the host; an x86-64
    Linux machine adds the emulated device for the headline dtypes; anything else is the host
    alone (qemu-sme2 is provisioned from Debian's x86-64 packages)."""
    machine = platform or Platform.here()
    if machine.system == "Darwin" and machine.machine == "arm64":
        return (DeviceSpec(kinds["mac"]),)
    host = DeviceSpec(kinds["host"])
    x86_linux = machine.system == "Linux" and machine.machine in ("x86_64", "AMD64")
    if "sme2" in machine.flags or not x86_linux:
        return (host,)
    emulated = DeviceSpec(
        kinds["qemu-sme2"],
        headline_only=True,
        added_by=f"--sme2-device={AUTO} adds the emulated SME2 device on a CPU without SME2",
    )
    return (host, emulated)
