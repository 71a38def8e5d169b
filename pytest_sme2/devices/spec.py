"""Device specs: ``KIND[:KEY=VALUE…]``, one device of a session's fleet.

``--sme2-device=android:serial=R5CX1234,mac,qemu-sme2:vl=64`` names three devices. A spec's keys
are its device's own options (``serial`` is ``--sme2-adb-serial``, ``vl`` is ``--sme2-qemu-vl``):
a key given in the spec wins for that device, and the flag stays the default for every device of
its kind. Each device class declares its keys (``Device.spec_keys``), so a typo is an error that
lists them rather than an option silently ignored.

``auto`` (the default) names the devices that show SME2 on this machine (:func:`auto_specs`):
where the CPU has none — every x86 laptop and CI runner, where users meet the plugin first — it is
the host beside the emulated ``qemu-sme2`` for each model's headline dtype, so the first report
already shows SME2-on against SME2-off: instruction ratios, the category shift, the SME2 kernels.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_sme2.devices.base import OptionGetter
from pytest_sme2.devices.host import cpu_flags
from pytest_sme2.devices.kinds import device_class
from pytest_sme2.errors import ConfigError
from pytest_sme2.records.device import device_file_name

#: The device list that stands for the devices showing SME2 on this machine.
AUTO = "auto"

_KEY = re.compile(r"[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class DeviceSpec:
    """One device: its kind (``--sme2-device`` name) and the options given with it, in order."""

    kind: str
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
        return ":".join([self.kind, *(f"{key}={value}" for key, value in self.options)])

    @property
    def directory(self) -> str:
        """The device's folder under the baseline and artifacts directories: the kind alone for a
        plain spec (where every existing baseline is), else ``KIND@KEY=VALUE…``
        (:func:`~pytest_sme2.records.device.device_file_name`)."""
        return device_file_name(self.id)

    def getter(self, flags: OptionGetter) -> OptionGetter:
        """The device's option getter: a key of this spec wins, else the flag (or ini) value."""
        given = {device_class(self.kind).spec_keys[key]: value for key, value in self.options}
        return lambda dest: given[dest] if dest in given else flags(dest)


def parse_device_specs(text: str, *, source: str = "--sme2-device") -> tuple[DeviceSpec, ...]:
    """The specs of a comma-separated list, ``auto`` expanded (a device also named explicitly
    is taken as named); ConfigError naming ``source`` and what is wrong."""
    specs: list[DeviceSpec] = []
    named: set[str] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise ConfigError(f"{source}={text!r}: an empty device in the list")
        for spec in auto_specs() if item == AUTO else (_parse_spec(item, source),):
            if not spec.added_by:
                if spec.id in named:
                    raise ConfigError(f"{source}: {spec.id!r} is listed twice")
                named.add(spec.id)
            specs.append(spec)
    # ``auto`` once (twice names the host twice): an added device is unique, unless also named
    return tuple(spec for spec in specs if not (spec.added_by and spec.id in named))


def _parse_spec(item: str, source: str) -> DeviceSpec:
    """One ``KIND[:KEY=VALUE…]``."""
    kind, *pairs = item.split(":")
    keys: Mapping[str, str] = device_class(kind).spec_keys
    options: list[tuple[str, str]] = []
    for pair in pairs:
        if "=" not in pair and options:  # a value with a colon: adb's host:port serials
            key, value = options.pop()
            options.append((key, f"{value}:{pair}"))
            continue
        key, sep, value = pair.partition("=")
        if not sep or not _KEY.fullmatch(key) or not value:
            raise ConfigError(f"{source}: {item!r}: expected KIND[:KEY=VALUE…], got {pair!r}")
        if key not in keys:
            known = ", ".join(sorted(keys)) or "none"
            raise ConfigError(
                f"{source}: {item!r}: {kind} takes no key {key!r} (its keys: {known})"
            )
        if any(key == seen for seen, _ in options):
            raise ConfigError(f"{source}: {item!r}: {key!r} given twice")
        options.append((key, value))
    return DeviceSpec(kind, tuple(options))


def auto_specs(
    system: str | None = None, machine: str | None = None, flags: set[str] | None = None
) -> tuple[DeviceSpec, ...]:
    """``auto`` on a machine (``platform.system()``, ``platform.machine()``, the CPU's feature
    flags; this one's by default): an Apple Silicon Mac measures natively (``mac``: SME2-on and
    off where the chip has SME2); a CPU with SME2 is the host; an x86-64 Linux machine adds the
    emulated device for the headline dtypes; anything else is the host alone (qemu-sme2 is
    provisioned from Debian's x86-64 packages)."""
    system = platform.system() if system is None else system
    machine = platform.machine() if machine is None else machine
    flags = cpu_flags() if flags is None else flags
    if system == "Darwin" and machine == "arm64":
        return (DeviceSpec("mac"),)
    if "sme2" in flags or system != "Linux" or machine not in ("x86_64", "AMD64"):
        return (DeviceSpec("host"),)
    emulated = DeviceSpec(
        "qemu-sme2",
        headline_only=True,
        added_by=f"--sme2-device={AUTO} adds the emulated SME2 device on a CPU without SME2",
    )
    return (DeviceSpec("host"), emulated)
