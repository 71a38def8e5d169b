"""Device lookup by ``--sme2-device`` name.

Adding a device means adding it here, never to the plugin.
"""

from __future__ import annotations

from pytest_sme2.devices.android import AndroidDevice
from pytest_sme2.devices.base import Device
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.devices.mac import MacDevice
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.errors import ConfigError

DEVICE_CLASSES: dict[str, type[Device]] = {
    cls.name: cls for cls in (HostDevice, QemuSme2Device, MacDevice, AndroidDevice)
}


def device_class(name: str) -> type[Device]:
    """The device class for ``--sme2-device=name``, or a ConfigError listing the choices."""
    try:
        return DEVICE_CLASSES[name]
    except KeyError:
        choices = ", ".join(sorted(DEVICE_CLASSES))
        raise ConfigError(
            f"--sme2-device={name!r} is not a device; choose one of: {choices}"
        ) from None
