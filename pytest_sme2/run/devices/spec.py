"""Device specs: ``KIND[:KEY=VALUE…]``, one device of a session's fleet.

``--sme2-device=android:serial=R5CX1234,mac,qemu-sme2:vl=64`` names three devices. A spec's keys
are its device's own options (``serial`` is ``--sme2-adb-serial``, ``vl`` is ``--sme2-qemu-vl``):
a key given in the spec wins for that device, and the flag stays the default for every device of
its kind. Each device class declares its keys (``Device.spec_keys``), so a typo is an error that
lists them rather than an option silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_sme2.errors import ConfigError
from pytest_sme2.run.devices.base import OptionGetter, device_file_name
from pytest_sme2.run.devices.registry import device_class

_KEY = re.compile(r"[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class DeviceSpec:
    """One device: its kind (``--sme2-device`` name) and the options given with it, in order."""

    kind: str
    options: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        """The spec as written: the device's name in test ids and reports."""
        return ":".join([self.kind, *(f"{key}={value}" for key, value in self.options)])

    @property
    def directory(self) -> str:
        """The device's folder under the baseline and artifacts directories: the kind alone for a
        plain spec (where every existing baseline is), else ``KIND@KEY=VALUE…``
        (:func:`~pytest_sme2.run.devices.base.device_file_name`)."""
        return device_file_name(self.id)

    def getter(self, flags: OptionGetter) -> OptionGetter:
        """The device's option getter: a key of this spec wins, else the flag (or ini) value."""
        given = {device_class(self.kind).spec_keys[key]: value for key, value in self.options}
        return lambda dest: given[dest] if dest in given else flags(dest)


def parse_device_specs(text: str, *, source: str = "--sme2-device") -> tuple[DeviceSpec, ...]:
    """The specs of a comma-separated list; ConfigError naming ``source`` and what is wrong."""
    specs: list[DeviceSpec] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise ConfigError(f"{source}={text!r}: an empty device in the list")
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
        spec = DeviceSpec(kind, tuple(options))
        if spec in specs:
            raise ConfigError(f"{source}: {spec.id!r} is listed twice")
        specs.append(spec)
    return tuple(specs)
