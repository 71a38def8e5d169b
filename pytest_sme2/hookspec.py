"""The hooks pytest-sme2 calls, for a conftest or another plugin to implement (as pytest-benchmark's
``hookspec.py``): the extension points that add a device kind, add to what a device says about
its machine, and add gates — without editing this package.

The built-in devices are registered through the first hook too (``pytest_sme2.devices.kinds`` is
its implementation), so a user's device is a peer of host, qemu-sme2, mac and android. A worked
example is in docs/extending.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_sme2.devices.base import Device
    from pytest_sme2.judge.gate import Gate


@pytest.hookspec
def pytest_sme2_device_kinds() -> Iterable[type[Device]]:
    """The device kinds this plugin adds: subclasses of :class:`pytest_sme2.devices.base.Device`,
    each with its ``name`` (what ``--sme2-device`` and a fleet spec ``KIND[:KEY=VALUE…]`` call it,
    and its baseline folder), the spec keys it takes and how it builds itself from options.

    Called when the session resolves its devices (and, under xdist, when it decides how to
    distribute them); every implementation's kinds are merged
    (:class:`pytest_sme2.devices.kinds.DeviceKinds`), and two kinds of one name are a usage error
    naming both. A kind's own command-line options are its plugin's to add (``pytest_addoption``
    in the same conftest).
    """


@pytest.hookspec
def pytest_sme2_update_machine_info(
    config: pytest.Config,
    device: str,
    fingerprint: dict[str, str],
    machine_class: dict[str, str],
) -> None:
    """Add to what ``device`` (its spec, ``mac`` or ``android:serial=R5CX1234``) says about itself,
    in place, once it is prepared.

    ``machine_class`` is the part that changes performance: a key added there (a lab's power
    profile, a phone's thermal state) keys a time record of its own, so time is judged only
    against measurements of the same class. ``fingerprint`` is everything the device says; a key
    added there alone is a note, recorded beside the times and shown when it changes.
    """


@pytest.hookspec
def pytest_sme2_gates(config: pytest.Config) -> Iterable[Gate]:
    """Gates this plugin adds to every judged case: objects with a ``name`` and a ``check(judging)``
    that returns :class:`pytest_sme2.records.verdict.Verdict` s
    (:class:`pytest_sme2.judge.gate.Gate`). Their verdicts fail, pass and skip as the built-in
    ones do, appear in every report, and count under ``--sme2-strict``."""
