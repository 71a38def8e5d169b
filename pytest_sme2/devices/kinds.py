"""The device kinds a session knows, by the name ``--sme2-device`` and a fleet spec call them
(:class:`DeviceKinds`): gathered from the ``pytest_sme2_device_kinds`` hook
(:mod:`pytest_sme2.hookspec`), so a conftest or another plugin adds a device — a board reached
over ssh, the host pinned to one core — without editing this package (docs/extending.md).

The built-in four come through the same hook: this module is a plugin (``plugin.py`` registers it
with the hook's spec) whose implementation returns them, so host, qemu-sme2, mac and android are
peers of a user's kind, and two kinds of one name are an error naming both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_sme2.devices.android import AndroidDevice
from pytest_sme2.devices.base import Device
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.devices.mac import MacDevice
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.errors import ConfigError

#: The devices this package brings.
BUILT_IN: tuple[type[Device], ...] = (HostDevice, QemuSme2Device, MacDevice, AndroidDevice)


def pytest_sme2_device_kinds() -> tuple[type[Device], ...]:
    """The built-in devices, added as any plugin adds its own."""
    return BUILT_IN


def _where(kind: object) -> str:
    """A kind as its author would find it: ``module.Class`` (anything else as it prints)."""
    if not isinstance(kind, type):
        return repr(kind)
    return f"{kind.__module__}.{kind.__qualname__}"


@dataclass(frozen=True)
class DeviceKinds:
    """Device kinds by name: a session's (:meth:`from_hook`), or any set of them (:meth:`of`)."""

    by_name: Mapping[str, type[Device]]

    @classmethod
    def of(cls, kinds: Iterable[object]) -> DeviceKinds:
        """The kinds given, each a :class:`~pytest_sme2.devices.base.Device` subclass with a
        ``name``; ConfigError naming the kind that is not one, or both kinds of one name."""
        by_name: dict[str, type[Device]] = {}
        for kind in kinds:
            if not (isinstance(kind, type) and issubclass(kind, Device)):
                raise ConfigError(
                    f"pytest_sme2_device_kinds returned {_where(kind)}, which is no subclass of "
                    "pytest_sme2.devices.base.Device"
                )
            name = getattr(kind, "name", None)
            if not isinstance(name, str) or not name:
                raise ConfigError(f"device kind {_where(kind)} has no name (class attribute)")
            known = by_name.setdefault(name, kind)
            if known is not kind:
                raise ConfigError(
                    f"two device kinds are named {name!r}: {_where(known)} and {_where(kind)}; "
                    "rename one (its `name` is what --sme2-device calls it)"
                )
        return cls(by_name)

    @classmethod
    def from_hook(cls, hook: Any) -> DeviceKinds:
        """Every kind the session's plugins and conftests add (``config.hook``), the built-in
        four among them."""
        return cls.of(kind for added in hook.pytest_sme2_device_kinds() for kind in added)

    def __getitem__(self, name: str) -> type[Device]:
        """The kind called ``name``, or a ConfigError listing the choices."""
        try:
            return self.by_name[name]
        except KeyError:
            choices = ", ".join(sorted(self.by_name))
            raise ConfigError(
                f"--sme2-device={name!r} is not a device; choose one of: {choices}"
            ) from None

    def __iter__(self) -> Iterator[type[Device]]:
        return iter(self.by_name.values())

    def add_options(self, add: Callable[..., None]) -> None:
        """Register every kind's own ``--sme2-*`` options with ``add`` (a parser group's
        ``addoption``)."""
        for kind in self:
            kind.add_options(add)


#: The built-in kinds alone: what the plugin registers options for when it loads, before any
#: conftest (a kind a conftest adds registers its own options there).
BUILT_IN_KINDS = DeviceKinds.of(BUILT_IN)
