"""Device kinds from the ``pytest_sme2_device_kinds`` hook, and what the machine-info hook adds to a
prepared device's info: on the objects (``DeviceKinds``, ``Fleet`` with the real host device), and
on a real pytest configuration for the hook's wiring (parsed, no session run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sme2.devices.host import HostDevice
from pytest_sme2.devices.kinds import BUILT_IN, BUILT_IN_KINDS, DeviceKinds
from pytest_sme2.devices.spec import DeviceSpec, parse_device_specs
from pytest_sme2.errors import ConfigError
from pytest_sme2.measure.fleet import Fleet, xdist_group

pytest_plugins = ["pytester"]


class Pinned(HostDevice):
    """The host, another kind: what a user's conftest adds."""

    name = "pinned"


class OtherHost(HostDevice):
    """A second kind that calls itself ``host``."""


def test_the_built_in_kinds_are_four_and_a_users_kind_joins_them() -> None:
    assert sorted(BUILT_IN_KINDS.by_name) == ["android", "host", "mac", "qemu-sme2"]
    kinds = DeviceKinds.of([*BUILT_IN, Pinned, Pinned])  # the same class twice is one kind
    (spec,) = parse_device_specs("pinned", kinds)
    assert spec.kind is Pinned and spec.id == "pinned"
    assert xdist_group(spec) == "pinned"  # a real device: one worker owns its cases
    with pytest.raises(ConfigError, match=r"'pinned' is not a device; choose one of: android, "):
        parse_device_specs("pinned", BUILT_IN_KINDS)


def test_two_kinds_of_one_name_or_a_kind_that_is_no_device_are_named() -> None:
    with pytest.raises(ConfigError) as twice:
        DeviceKinds.of([*BUILT_IN, OtherHost])
    said = str(twice.value)
    assert "two device kinds are named 'host': pytest_sme2.devices.host.HostDevice and " in said
    assert "test_kinds.OtherHost" in said
    with pytest.raises(ConfigError, match=r"returned 'host', which is no subclass"):
        DeviceKinds.of(["host"])


def test_a_conftests_kind_comes_through_the_hook_beside_the_built_in_ones(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    pytester.makeconftest(
        "from pytest_sme2.devices.host import HostDevice\n\n"
        "class Pinned(HostDevice):\n    name = 'pinned'\n\n"
        "def pytest_sme2_device_kinds():\n    return [Pinned]\n"
    )
    kinds = DeviceKinds.from_hook(pytester.parseconfig().hook)
    assert sorted(kinds.by_name) == ["android", "host", "mac", "pinned", "qemu-sme2"]
    assert kinds["host"] is HostDevice


def test_machine_info_added_once_prepared_keys_a_class_of_its_own(tmp_path: Path) -> None:
    """A key added to the machine class changes the class (its id: another time record) and is
    in the fingerprint; a key added to the fingerprint alone is a note."""
    calls = []

    def lab(*, device: str, fingerprint: dict[str, str], machine_class: dict[str, str]) -> None:
        calls.append(device)
        machine_class["power_profile"] = "quiet-bench"
        fingerprint["rack"] = "3"

    spec = DeviceSpec(HostDevice)
    device = Fleet(lambda dest: None, lab).device(spec)
    plain = device.describe()
    info = device.info()
    assert info.machine_class == {**plain.machine_class, "power_profile": "quiet-bench"}
    assert info.fingerprint["power_profile"] == "quiet-bench"
    assert info.notes["rack"] == "3" and "rack" not in info.machine_class
    assert info.class_id != plain.class_id
    assert (info.name, info.variants, info.limits) == (plain.name, plain.variants, plain.limits)
    device.info()
    assert calls == ["host"]  # once, when the fleet prepared it
    assert Fleet(lambda dest: None).device(spec).info() == plain  # no hook: as described
