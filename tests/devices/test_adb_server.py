"""Phones on another host (issue 49): the android device reaches its phone through an adb server
given as ``server=HOST:PORT`` — a lab machine's — and says in one line which of three things went
wrong: the server cannot be reached, it lists no devices, or it lists others but not this serial.

Against a real ``adb`` (Debian's, scripts/install_adb.sh) and a real server of its own on a free
port, since what is matched is what adb itself says; then one case end to end through the adb
double (tests/adb_double.py) behind two such servers, one of which goes away.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_sme2.devices.adb import Adb, AdbServer
from pytest_sme2.devices.android import AndroidDevice
from pytest_sme2.devices.kinds import BUILT_IN_KINDS
from pytest_sme2.devices.spec import parse_device_specs
from pytest_sme2.errors import ConfigError, DeviceLost, RunnerError
from pytest_sme2.measure.case import MeasurePlan
from pytest_sme2.measure.fleet import Fleet
from pytest_sme2.records.device import Variant
from pytest_sme2.runner.build import build_runner
from tests.adb_double import configure, install, servers_seen
from tests.devices.test_device_android import _FEATURES, NO_SME2_PHONE, cpuinfo
from tests.measurements import measure_toy_cnn

SERIAL = "R5CX12345"


def _free_port() -> int:
    """A port of 127.0.0.1 nobody listens on (now)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _adb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["adb", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def adb_server() -> Iterator[AdbServer]:
    """A real adb server of its own (a lab host's, here on 127.0.0.1), killed at the end.

    Reached as ``-H 127.0.0.1``: adb starts a missing server by itself only for ``localhost``
    (``* cannot start server on remote host`` otherwise), so a test of a server that is not
    there never starts one.
    """
    assert shutil.which("adb"), "adb is missing: bash scripts/install_adb.sh"
    port = _free_port()
    started = _adb("-P", str(port), "start-server")
    assert started.returncode == 0, started.stderr
    try:
        yield AdbServer("127.0.0.1", port)
    finally:
        _adb("-P", str(port), "kill-server")


@pytest.fixture
def listed_offline(adb_server: AdbServer) -> Iterator[str]:
    """The server listing one device, offline: the address of a socket that accepts and never
    answers, passed to ``adb connect`` (which waits 10 s for a handshake, in the background; the
    server lists the address from the start and goes on trying it)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        connect = subprocess.Popen(
            ["adb", *adb_server.args, "connect", address],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while address not in Adb(server=adb_server).attached():
                assert time.monotonic() < deadline, f"the server never listed {address}"
                time.sleep(0.05)
            yield address
        finally:
            connect.kill()
            connect.wait()


def _prepare_fails(adb: Adb) -> str:
    """The one-line message of preparing a phone through ``adb``."""
    with pytest.raises(RunnerError) as failure:
        AndroidDevice(adb=adb).prepare()
    message = str(failure.value)
    assert "\n" not in message
    return message


def test_the_server_option_lists_that_servers_devices_as_does_adbs_environment(
    adb_server: AdbServer, listed_offline: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    adb = Adb(serial=SERIAL, server=adb_server)
    assert adb.command("devices") == [
        "adb",
        "-H",
        "127.0.0.1",
        "-P",
        str(adb_server.port),
        "-s",
        SERIAL,
        "devices",
    ]
    assert adb.attached() == {listed_offline: "offline"}  # that server's, no other's
    # without server=, adb reads ADB_SERVER_SOCKET itself (nothing passed), and we name it
    monkeypatch.setenv("ADB_SERVER_SOCKET", f"tcp:{adb_server}")
    by_environment = Adb(serial=SERIAL)
    assert by_environment.command("devices") == ["adb", "-s", SERIAL, "devices"]
    assert by_environment.attached() == {listed_offline: "offline"}
    assert by_environment.server_name == f"{adb_server} (ADB_SERVER_SOCKET)"


def test_an_empty_server_says_so_naming_server_and_serial(adb_server: AdbServer) -> None:
    assert Adb(server=adb_server).attached() == {}
    said = _prepare_fails(Adb(serial=SERIAL, server=adb_server))
    assert said == (
        f"adb server {adb_server} lists no devices, so android device {SERIAL} is not there; "
        "plug the phone into that server's host and authorise it"
    )
    said = _prepare_fails(Adb(server=adb_server))
    assert said.startswith(f"adb server {adb_server} lists no devices, so android device (no ")


def test_an_unknown_serial_says_what_the_server_lists(
    adb_server: AdbServer, listed_offline: str
) -> None:
    said = _prepare_fails(Adb(serial=SERIAL, server=adb_server))
    assert said.startswith(
        f"adb server {adb_server} has no android device {SERIAL}: it lists {listed_offline} "
        "(offline); "
    )
    said = _prepare_fails(Adb(serial=listed_offline, server=adb_server))
    assert said.startswith(
        f"android device {listed_offline} on adb server {adb_server} is offline, not ready"
    )
    # a call for the serial (adb: "error: device 'R5CX12345' not found"): the device is lost
    with pytest.raises(DeviceLost) as lost:
        Adb(serial=SERIAL, server=adb_server)("shell", "true")
    assert str(lost.value) == (
        f"lost the connection to android device {SERIAL} (adb: error: device '{SERIAL}' not "
        f"found); adb server {adb_server} lists {listed_offline} (offline)"
    )


def test_a_server_that_is_not_running_or_went_away_is_named(adb_server: AdbServer) -> None:
    nobody = AdbServer("127.0.0.1", _free_port())
    said = _prepare_fails(Adb(serial=SERIAL, server=nobody))
    assert said == (
        f"adb server {nobody} cannot be reached (adb: cannot connect to daemon at tcp:{nobody}: "
        f"failed to connect to '{nobody}': Connection refused), so neither can android device "
        f"{SERIAL}; is the server running on its host (`adb -a -P {nobody.port} nodaemon server`)?"
    )
    with socket.socket() as probe:  # adb started no server there by itself
        assert probe.connect_ex(("127.0.0.1", nobody.port)) != 0
    adb = Adb(serial=SERIAL, server=adb_server)
    assert adb.attached() == {}
    assert _adb("-P", str(adb_server.port), "kill-server").returncode == 0
    with pytest.raises(DeviceLost, match=f"^adb server {adb_server} cannot be reached .*{SERIAL}"):
        adb("push", __file__, "/data/local/tmp/")  # mid-session: the lab host is gone


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("lab-host", "expected HOST:PORT, e.g. lab-host:5037"),
        ("lab-host:0", "the port '0' is not a number from 1 to 65535"),
        ("lab-host:99999", "the port '99999' is not a number from 1 to 65535"),
        ("lab-host:http", "the port 'http' is not a number from 1 to 65535"),
    ],
)
def test_a_bad_server_value_names_the_spec_and_what_is_wrong(value: str, says: str) -> None:
    (spec,) = parse_device_specs(f"android:server={value}:serial={SERIAL}", BUILT_IN_KINDS)
    with pytest.raises(ConfigError) as bad:
        Fleet({}.get).device(spec)
    assert str(bad.value) == (
        f"android:server={value}:serial={SERIAL}: --sme2-adb-server={value!r} (an android "
        f"spec's server=): {says}"
    )


def test_a_server_value_is_host_and_port() -> None:
    assert AdbServer.parse("lab-host:5037") == AdbServer("lab-host", 5037)
    assert AdbServer.parse("[::1]:5038").args == ("-H", "[::1]", "-P", "5038")  # as adb takes it
    with pytest.raises(ConfigError, match=r"=':5037' .*: expected HOST:PORT"):
        AdbServer.parse(":5037")  # (a spec cannot say so: its empty value fails first)


# --- one case through the adb double behind two servers -------------------------------------


def test_two_phones_of_one_serial_behind_two_servers_and_one_server_going_away(
    tmp_path: Path,
) -> None:
    """Two phones of one serial, each plugged into its own lab host: two devices of the fleet,
    every adb call naming its server; one case measured on each, then one server goes away — its
    device is lost, in one line naming that server, and the other goes on."""
    servers = {"A": "127.0.0.1:15037", "B": "127.0.0.1:15038"}  # the double listens on nothing
    roots, doubles = {}, {}
    for name, server in servers.items():
        roots[name] = tmp_path / name
        doubles[name] = install(
            roots[name], serial=SERIAL, cpuinfo=cpuinfo(8, _FEATURES), properties=NO_SME2_PHONE
        )
        configure(roots[name], server=server)
    adb = tmp_path / "adb"  # one adb client; `-H HOST -P PORT` picks the server, as adb's does
    adb.write_text(
        '#!/bin/sh\ncase "$4" in\n'
        + "".join(f'  {s.split(":")[1]}) exec {doubles[n]} "$@";;\n' for n, s in servers.items())
        + f'esac\nexec {doubles["A"]} "$@"\n'  # another server: A's double cannot reach it
    )
    adb.chmod(0o755)
    specs = parse_device_specs(
        ",".join(f"android:server={server}:serial={SERIAL}" for server in servers.values()),
        BUILT_IN_KINDS,
    )
    assert len({spec.directory for spec in specs}) == 2  # their own baselines
    options = {"sme2_adb": str(adb), "sme2_runner_on": str(build_runner("host"))}
    fleet = Fleet(options.get)
    plan = MeasurePlan(runs=2, warmup=0, rounds=1, traced_runs=1)
    for spec, server in zip(specs, servers.values(), strict=True):
        with fleet.using(spec):
            device = fleet.device(spec)
            assert device.info().name == spec.id
            assert device.info().notes["adb_server"] == server  # the report's machine info
            measured = measure_toy_cnn(device, plan, tmp_path / spec.directory)
        assert measured.variants[Variant.OFF].latencies_ms
    for name, server in servers.items():
        assert set(servers_seen(roots[name])) == {server}
    configure(roots["B"], server_gone=True)
    with pytest.raises(DeviceLost) as lost, fleet.using(specs[1]):
        measure_toy_cnn(fleet.device(specs[1]), plan, tmp_path / "lost")
    message = str(lost.value)
    assert "\n" not in message
    assert f"adb server {servers['B']} cannot be reached (adb: cannot connect to daemon" in message
    assert f"so neither can android device {SERIAL}" in message
    with pytest.raises(DeviceLost, match=f"^{specs[1].id} was lost earlier in this session: "):
        fleet.device(specs[1])
    with fleet.using(specs[0]):
        assert measure_toy_cnn(fleet.device(specs[0]), plan, tmp_path / "on").variants
