"""The adb transport of an ``android`` device: every call bounded by a deadline, a failure named as
what it is — a lost device (the USB cable, adbd restarting), a hung one, adb itself missing — and a
runner on the phone killed by its pid when the call that ran it is.

Apart from :mod:`pytest_sme2.devices.android` (the device: what is pushed where, what the phone
can prove, how a run's files come back) because none of it knows what runs: commands in, output
and the device's state out.
"""

from __future__ import annotations

import re
import shlex
import subprocess
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


class DeviceHung(RunnerError):
    """An adb call that did not finish within its deadline: the device (or adbd) stopped
    answering, or the process it runs never returned. Not a lost device: it is still listed."""


class Adb:
    """``adb`` (the ``program``) talking to one device, ``serial`` (None until the device resolves
    it: the only one attached). A plain class: the serial is found when the device is prepared."""

    def __init__(self, program: str = "adb", serial: str | None = None) -> None:
        self.program = program
        self.serial = serial

    def __call__(
        self, *args: str, check: bool = True, timeout: float = ADB_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run ``adb -s SERIAL ARGS``; a failing call is a lost device if the device is gone."""
        command = [self.program, *(["-s", self.serial] if self.serial else []), *args]
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
        """DeviceLost if the device is no longer attached (the USB cable, adbd restarting)."""
        if _DEVICE_LOST.search(said) or self.serial not in self.attached():
            raise DeviceLost(
                f"lost the connection to android device {self.serial} (adb: {said}); "
                f"`{self.program} devices` no longer lists it as ready"
            )

    def attached(self) -> dict[str, str]:
        """Serial -> state (``device``, ``offline``, ``unauthorized``) of what adb sees."""
        try:
            result = run_process([self.program, "devices"], timeout_s=KILL_TIMEOUT_S)
        except FileNotFoundError as err:
            raise self._missing() from err
        except subprocess.TimeoutExpired:
            raise RunnerError(
                f"`{self.program} devices` did not answer within {KILL_TIMEOUT_S:g} s: the adb "
                "server hangs (`adb kill-server` restarts it)"
            ) from None
        attached = {}
        for line in result.stdout.splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 2:
                attached[parts[0]] = parts[1]
        return attached

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


def tail(text: str, lines: int = 3) -> str:
    """The last ``lines`` non-blank lines of ``text`` as one line."""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "(no output)"
