"""Fixtures shared by the test modules that need them."""

from __future__ import annotations

import pytest

from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.devices.registry import device_class


@pytest.fixture(scope="session")
def qemu_device() -> QemuSme2Device:
    """The qemu-sme2 device as the plugin builds it from no options, provisioned (cached)."""
    prepared = device_class("qemu-sme2").from_options(lambda _: None)
    assert isinstance(prepared, QemuSme2Device)
    prepared.prepare()
    return prepared
