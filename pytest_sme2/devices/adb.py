"""The adb transport of an ``android`` device: every call bounded by a deadline and sent to one adb
server (:class:`AdbServer`: a lab host's, or the one adb's environment names), a failure named as
what it is — a server that is gone, one that lists no devices or not this one, a lost device (the
USB cable, adbd restarting), a hung one, adb itself missing — and a runner on the phone killed by
its pid when the call that ran it is.

Apart from :mod:`pytest_sme2.devices.android` (the device: what is pushed where, what the phone
can prove, how a run's files come back) because none of it knows what runs: commands in, output
and the device's state out.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pytest_sme2.errors import ConfigError, DeviceLost, RunnerError
from pytest_sme2.runner.invoke import DEFAULT_TIMEOUT_S, run_process

#: The deadline of an adb call that moves files or asks the device something.
ADB_TIMEOUT_S = 300
#: The deadline of the ``adb shell kill`` that ends a hung runner on the phone, and of ``adb
#: devices``: a device that cannot answer that in a minute is wedged, and saying so beats waiting.
KILL_TIMEOUT_S = 60
_DEVICE_LOST = re.compile(
    r"device (?:'[^']*' )?not found|no devices/emulators found|device offline|error: closed|"
    r"protocol fault|connection reset|device unauthorized"
)
#: What adb says when its server cannot be reached, most telling first (adb 29: ``error: cannot
#: connect to daemon at tcp:HOST:PORT: failed to connect to 'HOST:PORT': Connection refused``, or
#: ``failed to resolve host: …``, after a warning line ``failed to connect to 'HOST:PORT': …``);
#: each runs to the end of its line (:func:`tail` joins lines with `` | ``).
_SERVER_GONE = (
    re.compile(r"cannot connect to daemon[^\n|]*"),
    re.compile(r"failed to connect to [^\n|]*"),
)
SERIAL_ENV = "ANDROID_SERIAL"
#: The port adb's server listens on unless told otherwise.
DEFAULT_SERVER_PORT = 5037
#: The option (and device spec key ``server=``) naming the adb server.
SERVER_OPTION = "--sme2-adb-server"


@dataclass(frozen=True)
class AdbServer:
    """An adb server given by the user (``server=HOST:PORT``): phones plugged into a lab machine
    that runs ``adb -a -P 5037 nodaemon server``. Every call of the device names it with ``-H HOST
    -P PORT``, which adb prefers to its environment (``ADB_SERVER_SOCKET`` and the like)."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> AdbServer:
        """``HOST:PORT`` (an IPv6 host in brackets, as adb takes it: ``[::1]:5037``); a
        ConfigError naming the value and what is wrong with it."""
        host, sep, port = text.rpartition(":")
        if not sep or not host.strip():
            problem = "expected HOST:PORT, e.g. lab-host:5037"
        elif not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            problem = f"the port {port!r} is not a number from 1 to 65535"
        else:
            return cls(host, int(port))
        raise ConfigError(f"{SERVER_OPTION}={text!r} (an android spec's server=): {problem}")

    @property
    def args(self) -> tuple[str, ...]:
        return ("-H", self.host, "-P", str(self.port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def server_in_use(environ: Mapping[str, str]) -> str:
    """The server adb picks by itself (no ``-H``/``-P``), named for messages and the machine info.

    adb reads its environment itself, so nothing is passed; this only follows its order:
    ``ADB_SERVER_SOCKET`` (``tcp:HOST:PORT``), else ``ANDROID_ADB_SERVER_ADDRESS`` and
    ``ANDROID_ADB_SERVER_PORT``, else localhost:5037.
    """
    if socket := environ.get("ADB_SERVER_SOCKET"):
        address = socket.removeprefix("tcp:")
        return f"{address if ':' in address else 'localhost:' + address} (ADB_SERVER_SOCKET)"
    host, port = environ.get("ANDROID_ADB_SERVER_ADDRESS"), environ.get("ANDROID_ADB_SERVER_PORT")
    if host or port:
        address = f"{host or 'localhost'}:{port or DEFAULT_SERVER_PORT}"
        return f"{address} (ANDROID_ADB_SERVER_ADDRESS/PORT)"
    return f"localhost:{DEFAULT_SERVER_PORT} (adb's default)"


class DeviceHung(RunnerError):
    """An adb call that did not finish within its deadline: the device (or adbd) stopped
    answering, or the process it runs never returned. Not a lost device: it is still listed."""


class Adb:
    """``adb`` (the ``program``) talking to one device, ``serial`` (None until the device resolves
    it: the only one attached), through ``server`` (None: the one adb's environment names). A
    plain class: the serial is found when the device is prepared."""

    def __init__(
        self, program: str = "adb", serial: str | None = None, server: AdbServer | None = None
    ) -> None:
        self.program = program
        self.serial = serial
        self.server = server

    @property
    def server_name(self) -> str:
        """The server every call goes through: ``HOST:PORT``, or what adb's environment names."""
        return str(self.server) if self.server else server_in_use(os.environ)

    def command(self, *args: str) -> list[str]:
        """``adb [-H HOST -P PORT] [-s SERIAL] ARGS``: what each call of this device runs."""
        return [*self._to_server(), *(["-s", self.serial] if self.serial else []), *args]

    def _to_server(self) -> list[str]:
        return [self.program, *(self.server.args if self.server else ())]

    def __call__(
        self, *args: str, check: bool = True, timeout: float = ADB_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run ``adb -s SERIAL ARGS``; a failing call is a lost device if the device is gone."""
        command = self.command(*args)
        try:
            result = run_process(command, timeout_s=timeout)
        except FileNotFoundError as err:
            raise self._missing() from err
        except subprocess.TimeoutExpired as err:
            said = tail(f"{err.stdout or ''}\n{err.stderr or ''}")
            raise DeviceHung(
                f"android device {self.serial} hung: adb did not finish within its {timeout:g} s "
                f"deadline (--sme2-timeout), killed; last output: {said}; "
                f"command: {shlex.join(command)}"
            ) from None
        if check and result.returncode != 0:
            said = tail(result.stderr or result.stdout)
            self.raise_if_lost(said)
            raise RunnerError(
                f"adb failed (exit {result.returncode}) on android device {self.serial}: {said}; "
                f"command: {shlex.join(command)}"
            )
        return result

    def _missing(self) -> ConfigError:
        return ConfigError(
            f"--sme2-adb={self.program}: no such program; install Android platform-tools or "
            "pass the adb path"
        )

    def shell(
        self, command: str, *, check: bool = True, timeout: float = DEFAULT_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        return self("shell", command, check=check, timeout=timeout)

    def push(self, local: Path, remote: PurePosixPath) -> None:
        self("push", str(local), str(remote))

    def raise_if_lost(self, said: str) -> None:
        """DeviceLost if the device can no longer be reached: its server gone, or the server no
        longer listing it (the USB cable, adbd restarting)."""
        if reason := _server_gone(said):
            raise DeviceLost(self._unreachable(reason))
        attached = self.attached()
        if _DEVICE_LOST.search(said) or self.serial not in attached:
            raise DeviceLost(
                f"lost the connection to android device {self.serial} (adb: {said}); adb server "
                f"{self.server_name} lists {_listing(attached)}"
            )

    def raise_if_adb_failed(self, code: int, said: str) -> None:
        """For a failed ``adb shell``: DeviceLost when the failure is adb's, not the command's —
        exit 255 (the connection dropped under the shell), or adb's exit 1 before any shell ran
        (its server gone, the device not found)."""
        if code == 255 or _server_gone(said) or _DEVICE_LOST.search(said):
            self.raise_if_lost(tail(said))

    def attached(self) -> dict[str, str]:
        """Serial -> state (``device``, ``offline``, ``unauthorized``) of what the server lists;
        DeviceLost when the server cannot be reached."""
        command = [*self._to_server(), "devices"]
        try:
            result = run_process(command, timeout_s=KILL_TIMEOUT_S)
        except FileNotFoundError as err:
            raise self._missing() from err
        except subprocess.TimeoutExpired:
            raise RunnerError(
                f"`{shlex.join(command)}` did not answer within {KILL_TIMEOUT_S:g} s: adb server "
                f"{self.server_name} hangs (`adb kill-server` there restarts it)"
            ) from None
        if result.returncode != 0:
            said = tail(result.stderr or result.stdout)
            raise DeviceLost(self._unreachable(_server_gone(said) or said))
        attached = {}
        for line in result.stdout.splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 2:
                attached[parts[0]] = parts[1]
        return attached

    def ready_serial(self) -> str:
        """The serial to use: as given, else the only ready device the server lists. Otherwise one
        line naming the server and the serial: the server gone (DeviceLost), listing no devices or
        not this one ready (RunnerError), listing several when no serial is given (ConfigError)."""
        attached = self.attached()
        ready = sorted(serial for serial, state in attached.items() if state == "device")
        server, listed = self.server_name, _listing(attached)
        if not attached:
            raise RunnerError(
                f"adb server {server} lists no devices, so {self._device} is not there; plug the "
                "phone into that server's host and authorise it"
            )
        if self.serial is None:
            if len(ready) != 1:
                raise ConfigError(
                    f"--sme2-adb-serial is needed: adb server {server} lists {listed}; pass the "
                    f"serial or set {SERIAL_ENV}"
                )
            return ready[0]
        if self.serial in ready:
            return self.serial
        if state := attached.get(self.serial):
            raise RunnerError(
                f"android device {self.serial} on adb server {server} is {state}, not ready (it "
                f"lists {listed}); check the cable and authorise this computer on the phone"
            )
        raise RunnerError(
            f"adb server {server} has no android device {self.serial}: it lists {listed}; check "
            f"the serial, and that the phone is plugged into that server's host"
        )

    def _unreachable(self, reason: str) -> str:
        port = self.server.port if self.server else "PORT"
        return (
            f"adb server {self.server_name} cannot be reached (adb: {reason}), so neither can "
            f"{self._device}; is the server running on its host (`adb -a -P {port} nodaemon "
            "server`)?"
        )

    @property
    def _device(self) -> str:
        return f"android device {self.serial or '(no serial given)'}"

    def run_killable(
        self, command: str, pid_file: PurePosixPath, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``adb shell command`` (unchecked) for a command that writes its pid to ``pid_file``;
        should it hang past ``timeout``, the DeviceHung says whether the process on the phone
        was killed (:meth:`kill_remote`)."""
        try:
            return self.shell(command, check=False, timeout=timeout)
        except DeviceHung as hung:
            raise DeviceHung(f"{hung}; {self.kill_remote(pid_file)}") from None

    def kill_remote(self, pid_file: PurePosixPath) -> str:
        """Kill the process that ``pid_file`` names on the phone; what happened, as a clause.

        Killing the local ``adb`` (its deadline) ends the shell's connection, not the process on
        the phone, which would go on holding the cores the next case is timed on.
        """
        path = shlex.quote(str(pid_file))
        script = (
            f"pid=$(cat {path}) && if kill -9 $pid 2>/dev/null; then echo killed $pid; "
            f"else echo ended $pid; fi"
        )
        try:
            answer = self.shell(script, check=False, timeout=KILL_TIMEOUT_S)
        except RunnerError as err:  # hung again, or lost
            return f"the runner on the device could not be killed ({err})"
        said = answer.stdout.split()
        if said[:1] == ["killed"]:
            return f"the runner on the device (pid {said[1]}) was killed"
        if said[:1] == ["ended"]:
            return f"the runner on the device (pid {said[1]}) had ended"
        reason = tail(answer.stderr or answer.stdout)
        return f"the runner on the device could not be killed (no pid in {pid_file}: {reason})"


def _server_gone(said: str) -> str | None:
    """adb's reason when it could not reach its server, else None."""
    for pattern in _SERVER_GONE:
        if found := pattern.search(said):
            return found[0].strip()
    return None


def _listing(attached: Mapping[str, str]) -> str:
    return ", ".join(f"{serial} ({state})" for serial, state in attached.items()) or "no devices"


def tail(text: str, lines: int = 3) -> str:
    """The last ``lines`` non-blank lines of ``text`` as one line."""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "(no output)"
