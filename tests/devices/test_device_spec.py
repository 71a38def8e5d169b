"""Device specs (``KIND[:KEY=VALUE…]``): parsing, their names, keys that are real options, and the
default (``auto``) on every kind of machine."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.devices.android import AndroidDevice
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.devices.kinds import BUILT_IN_KINDS, DeviceKinds
from pytest_sme2.devices.mac import MacDevice
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.devices.spec import DeviceSpec, Platform, auto_specs, parse_device_specs
from pytest_sme2.errors import ConfigError
from pytest_sme2.settings import fleet_specs

pytest_plugins = ["pytester"]

KINDS = BUILT_IN_KINDS
X86_LINUX = Platform("Linux", "x86_64", frozenset({"avx2", "sse4_2"}))
SME2_LINUX = Platform("Linux", "aarch64", frozenset({"asimd", "sme", "sme2"}))
APPLE_SILICON = Platform("Darwin", "arm64")


def parse(text: str, platform: Platform = X86_LINUX) -> tuple[DeviceSpec, ...]:
    return parse_device_specs(text, KINDS, platform=platform)


def test_a_fleet_parses_in_order_with_each_devices_options() -> None:
    specs = parse("qemu-sme2:vl=32, qemu-sme2:vl=64,android:serial=R5CX:cpu-mask=80,mac")
    assert specs == (
        DeviceSpec(QemuSme2Device, (("vl", "32"),)),
        DeviceSpec(QemuSme2Device, (("vl", "64"),)),
        DeviceSpec(AndroidDevice, (("serial", "R5CX"), ("cpu-mask", "80"))),
        DeviceSpec(MacDevice),
    )
    assert [spec.id for spec in specs] == [
        "qemu-sme2:vl=32",
        "qemu-sme2:vl=64",
        "android:serial=R5CX:cpu-mask=80",
        "mac",
    ]
    # a plain device keeps the folder every existing baseline is in; no colon in any folder
    assert [spec.directory for spec in specs][-1] == "mac"
    assert all(":" not in spec.directory for spec in specs)


def test_a_specs_key_wins_over_the_flag_which_stays_the_default() -> None:
    flags = {"sme2_qemu_vl": "16", "sme2_qemu": "/opt/qemu-aarch64"}.get
    (vl64,) = parse("qemu-sme2:vl=64")
    get = vl64.getter(flags)
    assert get("sme2_qemu_vl") == "64" and get("sme2_qemu") == "/opt/qemu-aarch64"
    assert DeviceSpec(QemuSme2Device).getter(flags)("sme2_qemu_vl") == "16"
    device = vl64.kind.from_options(get)
    assert device.sme_vector_length == 64  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("qemu-sme2:vl", "expected KIND[:KEY=VALUE…], got 'vl'"),
        ("qemu-sme2:speed=2", "qemu-sme2 takes no key 'speed' (its keys: qemu, vl, worker)"),
        ("host:vl=2", "host takes no key 'vl' (its keys: worker)"),
        ("phone", "'phone' is not a device; choose one of: android, host, mac, qemu-sme2"),
        ("host,,mac", "an empty device in the list"),
        ("mac,mac", "'mac' is listed twice"),
        ("qemu-sme2:vl=1:vl=2", "'vl' given twice"),
    ],
)
def test_a_bad_spec_is_one_line_naming_the_option(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match="--sme2-device") as failure:
        parse(text)
    assert says in str(failure.value)


@pytest.mark.parametrize("kind", sorted(KINDS.by_name))
def test_every_spec_key_is_one_of_the_devices_own_options(kind: str) -> None:
    dests: set[str] = set()

    def add(*flags: str, **settings: Any) -> None:
        dests.add(settings["dest"])

    KINDS[kind].add_options(add)
    assert set(KINDS[kind].spec_keys.values()) <= dests


def test_any_device_may_name_the_xdist_worker_that_runs_it_which_is_where_not_what() -> None:
    """``worker=ID`` (docs/lab.md): its own device in test ids and run directories, not an
    option of the device, and the baselines of the device without it."""
    from pytest_sme2.measure.fleet import xdist_group

    mac, emulated, plain = parse("mac:worker=mini1,qemu-sme2:vl=32:worker=lab,qemu-sme2")
    assert (mac.worker, emulated.worker, plain.worker) == ("mini1", "lab", None)
    assert emulated.directory == "qemu-sme2@vl=32@worker=lab"
    assert emulated.baseline_directory == "qemu-sme2@vl=32"
    assert mac.baseline_directory == plain.baseline_directory.replace("qemu-sme2", "mac")
    flags: dict[str, str] = {}
    device = emulated.kind.from_options(emulated.getter(flags.get))
    assert device.sme_vector_length == 32  # type: ignore[attr-defined]
    # the named worker's group: an emulated device named for a worker is one, as a real one is
    assert [xdist_group(spec) for spec in (mac, emulated, plain)] == [
        "mac:worker=mini1",
        "qemu-sme2:vl=32:worker=lab",
        None,
    ]


def test_a_value_may_hold_a_colon_as_adb_over_tcp_serials_do() -> None:
    (phone,) = parse("android:serial=192.168.1.5:5555:cpu-mask=80")
    assert phone.options == (("serial", "192.168.1.5:5555"), ("cpu-mask", "80"))
    assert phone.id == "android:serial=192.168.1.5:5555:cpu-mask=80"
    assert phone.directory == "android@serial=192.168.1.5@5555@cpu-mask=80"


def test_auto_adds_the_emulated_sme2_device_on_a_cpu_without_sme2() -> None:
    """Where users meet the plugin first (x86 laptops and CI): the host, and qemu-sme2 for each
    model's headline dtype, so the first report shows SME2; a machine with SME2 measures it."""
    host, emulated = auto_specs(KINDS, X86_LINUX)
    assert host == DeviceSpec(HostDevice)
    assert (emulated.id, emulated.headline_only) == ("qemu-sme2", True)
    assert emulated.added_by.startswith("--sme2-device=auto adds the emulated SME2 device")
    assert emulated.directory == "qemu-sme2"  # the committed baselines of qemu-sme2 serve it
    assert auto_specs(KINDS, SME2_LINUX) == (DeviceSpec(HostDevice),)
    assert auto_specs(KINDS, APPLE_SILICON) == (DeviceSpec(MacDevice),)
    # no Debian x86-64 qemu to provision: the host alone
    assert auto_specs(KINDS, Platform("Linux", "aarch64", frozenset({"asimd"}))) == (
        DeviceSpec(HostDevice),
    )
    assert auto_specs(KINDS, Platform("Windows", "AMD64")) == (DeviceSpec(HostDevice),)


def test_auto_beside_named_devices_gives_way_to_them() -> None:
    assert [s.id for s in parse("auto")] == ["host", "qemu-sme2"]
    # qemu-sme2 named: every dtype of it, once
    (host, named) = parse("auto,qemu-sme2")
    assert host.id == "host" and named == DeviceSpec(QemuSme2Device)
    assert [s.id for s in parse("qemu-sme2:vl=64,auto")] == ["qemu-sme2:vl=64", "host", "qemu-sme2"]
    with pytest.raises(ConfigError, match="'host' is listed twice"):
        parse("host,auto")


@pytest.mark.parametrize(
    ("machine", "devices"),
    [(APPLE_SILICON, ["mac"]), (X86_LINUX, ["host", "qemu-sme2"]), (SME2_LINUX, ["host"])],
    ids=["mac", "x86-64 linux", "sme2 linux"],
)
def test_the_default_device_is_auto_on_every_kind_of_machine(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    machine: Platform,
    devices: list[str],
) -> None:
    """The plugin's options as pytest parses them with nothing given (no flag, no ini, not this
    suite's ``--sme2-device=host`` for inner sessions): the fleet is ``auto``'s for each machine,
    whatever machine runs this test."""
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    config = pytester.parseconfig()
    assert config.getoption("sme2_device") is None
    kinds = DeviceKinds.from_hook(config.hook)
    default = fleet_specs(config.getoption, config.getini, kinds, machine)
    assert default == auto_specs(kinds, machine)
    assert [spec.id for spec in default] == devices


def test_a_headline_only_device_takes_each_models_first_selected_dtype() -> None:
    from pytest_sme2.export.model_spec import ModelSpec
    from pytest_sme2.settings import OPTIONS, Settings, resolve

    ini = {option.dest: option.default for option in OPTIONS}

    def settings(dtypes: tuple[str, ...]) -> Settings:
        defaults = resolve(lambda dest: None, lambda key: ini.get(key, ""), Path("."), KINDS)
        return dataclasses.replace(
            defaults,
            devices=(DeviceSpec(HostDevice), DeviceSpec(QemuSme2Device, headline_only=True)),
            dtypes=dtypes,
        )

    model = ModelSpec("m", lambda: None, lambda seed: (), "", ("fp32", "int8", "8da4w"))
    cases = settings(()).cases([model])
    assert [(c.device.id, c.dtype) for c in cases] == [
        ("host", "fp32"),
        ("host", "int8"),
        ("host", "8da4w"),
        ("qemu-sme2", "fp32"),
    ]
    cases = settings(("int8", "8da4w")).cases([model])
    assert [(c.device.id, c.dtype) for c in cases if c.device.headline_only] == [
        ("qemu-sme2", "int8")
    ]
