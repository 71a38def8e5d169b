"""``android``: a phone or board over adb — the runner, its libraries and the model pushed to a work
directory, run from ``adb shell``, results pulled back.

The runner must speak sme2_runner's command line (``pytest_sme2/runner``): per-run timings, real
inputs, outputs. There is no Android executorch wheel to build it against here, so the user
supplies it (``--sme2-runner-on``, built with the NDK against an executorch Android build; see
the README). Its shared libraries are found from its ``DT_NEEDED`` entries next to it and on its
``RUNPATH`` and pushed with it, ``libc++_shared.so`` from ``$ANDROID_NDK`` when it is not there.

SME2-off is either a second runner (``--sme2-runner-off``, e.g. the reference kit's SME2-off
build) or the same runner with ``hide_sme.so`` preloaded, cross-built with the NDK when
``ANDROID_NDK`` is set: cpuinfo on Android arm64 reads ``getauxval`` too (bionic has no
``__getauxval``, so a two-line bridge forwards to the next ``getauxval`` with ``dlsym``).

What the shell is asked and answers (device facts, the command line) is in
:mod:`~pytest_sme2.devices.android_shell`, what is pushed and built beside the runner in
:mod:`~pytest_sme2.devices.android_bundle`, the kernels a Debug runner logs are kept by
:class:`~pytest_sme2.devices.kernel_log.KernelLogs`.

Everything that can go wrong on a phone — no such device, a runner crash, the USB cable — fails
the test with a one-line :class:`RunnerError` naming what happened and a file holding the device
log (``logcat``).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import ClassVar

from pytest_sme2.cache import content_key
from pytest_sme2.devices.android_bundle import (
    NDK_ENV,
    build_android_shim,
    ndk_libcxx,
    runner_libraries,
)
from pytest_sme2.devices.android_shell import (
    CLASS_PROPERTIES,
    FACTS_COMMAND,
    DeviceFacts,
    check_cpu_mask,
    parse_device_facts,
    shell_command,
)
from pytest_sme2.devices.base import Device, OptionGetter
from pytest_sme2.devices.host import isa_features, software_class, software_fingerprint
from pytest_sme2.devices.kernel_log import KernelLogs
from pytest_sme2.devices.runner_pair import RUNNER_SPEC_KEYS, add_runner_options
from pytest_sme2.errors import ConfigError, DeviceLost, RunnerError
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.evidence import Sme2Evidence
from pytest_sme2.runner.invoke import (
    DEFAULT_TIMEOUT_S,
    ETDUMP_NAME,
    LOG_NAME,
    OUTPUTS_NAME,
    TIMINGS_NAME,
    RunPlan,
    RunResult,
    collect_result,
    exit_reason,
    run_process,
    runner_command,
    runner_tail,
    save_log,
)
from pytest_sme2.runner.kernel_libraries import refuse_without_kernels

DEFAULT_DEVICE_DIR = "/data/local/tmp/pytest-sme2"
SERIAL_ENV = "ANDROID_SERIAL"
"""The API level the shim is built for (Android 9): older than any SME2 phone."""

LOGCAT_NAME = "logcat.txt"
_ADB_TIMEOUT_S = 300
#: The deadline of the ``adb shell kill`` that ends a hung runner on the phone: a device that
#: cannot answer that in a minute is wedged, and saying so beats waiting.
_KILL_TIMEOUT_S = 60
RUNNER_PID_NAME = "runner.pid"
_LOGCAT_LINES = 400
_DEVICE_LOST = re.compile(
    r"device (?:'[^']*' )?not found|no devices/emulators found|device offline|error: closed|"
    r"protocol fault|connection reset|device unauthorized"
)


class DeviceHung(RunnerError):
    """An adb call that did not finish within its deadline: the device (or adbd) stopped
    answering, or the process it runs never returned. Not a lost device: it is still listed."""


# --- the device ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bundle:
    """A runner, pushed with its libraries to one directory on the device."""

    directory: PurePosixPath
    runner: Path


class AndroidDevice(Device):
    """Runs the runner on an Android device through adb."""

    name = "android"

    def __init__(
        self,
        *,
        serial: str | None = None,
        adb: str = "adb",
        device_dir: str = DEFAULT_DEVICE_DIR,
        cpu_mask: str | None = None,
        runner_on: Path | None = None,
        runner_off: Path | None = None,
        shim: Path | None = None,
        ndk: Path | None = None,
    ) -> None:
        """``shim`` is a prebuilt arm64 ``hide_sme.so``; without it and without ``runner_off``
        it is built with ``ndk`` (default ``$ANDROID_NDK``) when there is one."""
        self.serial = serial
        self.adb = adb
        self.device_dir = PurePosixPath(device_dir)
        self.cpu_mask = check_cpu_mask(cpu_mask) if cpu_mask else None
        self.runner_on = runner_on
        self.runner_off = runner_off
        self.shim = shim
        self.ndk = ndk if ndk is not None else _env_path(NDK_ENV)
        self._facts: DeviceFacts | None = None
        self._bundles: dict[Variant, _Bundle] = {}
        self._preload: PurePosixPath | None = None
        self._pushed: dict[tuple[str, int, int], PurePosixPath] = {}
        self._runs = itertools.count()
        self._kernels = KernelLogs("XNNPACK kernel log (logcat)")

    spec_keys: ClassVar[Mapping[str, str]] = {
        "serial": "sme2_adb_serial",
        "adb": "sme2_adb",
        "dir": "sme2_android_dir",
        "cpu-mask": "sme2_cpu_mask",
        **RUNNER_SPEC_KEYS,
    }

    @classmethod
    def add_options(cls, add: Callable[..., None]) -> None:
        add(
            "--sme2-adb-serial",
            dest="sme2_adb_serial",
            default=None,
            help=f"android: the device's serial (default: ${SERIAL_ENV}, else the only device)",
        )
        add("--sme2-adb", dest="sme2_adb", default=None, help="android: adb binary (default: adb)")
        add(
            "--sme2-android-dir",
            dest="sme2_android_dir",
            default=None,
            help=f"android: work directory on the device (default: {DEFAULT_DEVICE_DIR})",
        )
        add(
            "--sme2-cpu-mask",
            dest="sme2_cpu_mask",
            default=None,
            help="android: taskset CPU mask (hex) to pin the runner, e.g. 80 for core 7",
        )
        add_runner_options(add)

    @classmethod
    def from_options(cls, get: OptionGetter) -> AndroidDevice:
        on, off = get("sme2_runner_on"), get("sme2_runner_off")
        return cls(
            serial=get("sme2_adb_serial") or os.environ.get(SERIAL_ENV) or None,
            adb=get("sme2_adb") or "adb",
            device_dir=get("sme2_android_dir") or DEFAULT_DEVICE_DIR,
            cpu_mask=get("sme2_cpu_mask"),
            runner_on=Path(on).expanduser() if on else None,
            runner_off=Path(off).expanduser() if off else None,
        )

    # -- adb ---------------------------------------------------------------------------------

    def _adb(
        self, *args: str, check: bool = True, timeout: float = _ADB_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run ``adb -s SERIAL ARGS``; a failing call is a lost device if the device is gone."""
        command = [self.adb, *(["-s", self.serial] if self.serial else []), *args]
        try:
            result = run_process(command, timeout_s=timeout)
        except FileNotFoundError as err:
            raise ConfigError(
                f"--sme2-adb={self.adb}: no such program; install Android platform-tools or "
                "pass the adb path"
            ) from err
        except subprocess.TimeoutExpired as err:
            said = _tail(f"{err.stdout or ''}\n{err.stderr or ''}")
            raise DeviceHung(
                f"android device {self.serial} hung: adb did not finish within its {timeout:g} s "
                f"deadline (--sme2-timeout), killed; last output: {said}; "
                f"command: {shlex.join(command)}"
            ) from None
        if check and result.returncode != 0:
            said = _tail(result.stderr or result.stdout)
            self._raise_if_lost(said)
            raise RunnerError(
                f"adb failed (exit {result.returncode}) on android device {self.serial}: {said}; "
                f"command: {shlex.join(command)}"
            )
        return result

    def _raise_if_lost(self, said: str) -> None:
        """RunnerError if the device is no longer attached (the USB cable, adbd restarting)."""
        if _DEVICE_LOST.search(said) or self.serial not in self._attached():
            raise DeviceLost(
                f"lost the connection to android device {self.serial} (adb: {said}); "
                f"`{self.adb} devices` no longer lists it as ready"
            )

    def _attached(self) -> dict[str, str]:
        """Serial -> state (``device``, ``offline``, ``unauthorized``) of what adb sees."""
        try:
            result = run_process([self.adb, "devices"], timeout_s=_KILL_TIMEOUT_S)
        except FileNotFoundError as err:
            raise ConfigError(
                f"--sme2-adb={self.adb}: no such program; install Android platform-tools or "
                "pass the adb path"
            ) from err
        except subprocess.TimeoutExpired:
            raise RunnerError(
                f"`{self.adb} devices` did not answer within {_KILL_TIMEOUT_S:g} s: the adb "
                "server hangs (`adb kill-server` restarts it)"
            ) from None
        attached = {}
        for line in result.stdout.splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 2:
                attached[parts[0]] = parts[1]
        return attached

    def _shell(
        self, command: str, *, check: bool = True, timeout: float = DEFAULT_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        return self._adb("shell", command, check=check, timeout=timeout)

    def _push(self, local: Path, remote: PurePosixPath) -> None:
        self._adb("push", str(local), str(remote))

    def _push_file(self, local: Path) -> PurePosixPath:
        """Push a model or inputs file once per session (keyed by path, size and mtime)."""
        stat = local.stat()
        key = (str(local.resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in self._pushed:
            remote = self.device_dir / "files" / content_key(*map(str, key)) / local.name
            self._shell(f"mkdir -p {shlex.quote(str(remote.parent))}")
            self._push(local, remote)
            self._pushed[key] = remote
        return self._pushed[key]

    # -- prepare -----------------------------------------------------------------------------

    def prepare(self) -> None:
        if self._facts is not None:
            return
        attached = self._attached()
        ready = sorted(serial for serial, state in attached.items() if state == "device")
        if self.serial is None:
            if len(ready) != 1:
                listed = ", ".join(f"{s} ({state})" for s, state in attached.items()) or "none"
                raise ConfigError(
                    f"--sme2-adb-serial is needed: adb lists {listed}; pass the serial or set "
                    f"{SERIAL_ENV}"
                )
            self.serial = ready[0]
        elif self.serial not in ready:
            state = attached.get(self.serial)
            raise RunnerError(
                f"android device {self.serial} is "
                + (f"{state}, not ready" if state else "not attached")
                + f" (`{self.adb} devices` lists: {', '.join(attached) or 'nothing'}); "
                "check the cable and authorise this computer on the phone"
            )
        if self.runner_on is None:
            raise ConfigError(
                "the android device needs --sme2-runner-on: sme2_runner built for Android "
                "arm64 with the NDK (see docs/devices.md, 'android')"
            )
        facts = parse_device_facts(self._shell(FACTS_COMMAND).stdout)
        self._shell(f"mkdir -p {shlex.quote(str(self.device_dir))}")
        if not facts.has_sme2:  # without SME2 on the CPU, any runner runs SME2-off
            off = self.runner_off or self.runner_on
            self._bundles[Variant.OFF] = self._push_bundle(off, "sme2-off")
        else:
            self._bundles[Variant.ON] = self._push_bundle(self.runner_on, "sme2-on")
            if self.runner_off is not None:
                self._bundles[Variant.OFF] = self._push_bundle(self.runner_off, "sme2-off")
            elif shim := self.shim or (build_android_shim(self.ndk) if self.ndk else None):
                self._preload = self.device_dir / "hide_sme.so"
                self._push(shim, self._preload)
                self._bundles[Variant.OFF] = self._bundles[Variant.ON]
        self._facts = facts

    def _push_bundle(self, runner: Path, name: str) -> _Bundle:
        if not runner.is_file():
            option = "--sme2-runner-off" if runner == self.runner_off else "--sme2-runner-on"
            raise ConfigError(f"{option}={runner}: no such file")
        extra = [libcxx.parent] if self.ndk and (libcxx := ndk_libcxx(self.ndk)) else []
        libraries, missing = runner_libraries(runner, extra_dirs=extra)
        if "libc++_shared.so" in missing:
            raise ConfigError(
                f"{runner} needs libc++_shared.so: put it beside the runner or set {NDK_ENV} "
                "to the NDK it was built with"
            )
        directory = self.device_dir / name
        self._shell(f"mkdir -p {shlex.quote(str(directory))}")
        for path in (runner, *libraries.values()):
            self._push(path, directory / (runner.name if path == runner else path.name))
        self._shell(f"chmod 755 {shlex.quote(str(directory / runner.name))}")
        return _Bundle(directory, runner)

    def _prepared(self) -> DeviceFacts:
        self.prepare()
        assert self._facts is not None
        return self._facts

    # -- info --------------------------------------------------------------------------------

    def info(self) -> DeviceInfo:
        facts = self._prepared()
        variants = tuple(v for v in (Variant.ON, Variant.OFF) if v in self._bundles)
        # Two phones of one model and SoC are one class; the serial and Android version are notes.
        # The CPU mask is in it: the same phone pinned to another core type is another machine.
        machine_class = {
            **{k: v for k, v in facts.properties.items() if k in CLASS_PROPERTIES},
            "isa": isa_features(set(facts.features)),
            "cores": str(facts.cores),
            "cpu_mask": self.cpu_mask or "all",
            **software_class(),
        }
        fingerprint = {
            "serial": self.serial or "",
            **facts.properties,
            "cpu_features": " ".join(sorted(f for f in facts.features if "sme" in f)) or "no SME",
            **machine_class,
            "runner_on": _identity(self.runner_on),
            "runner_off": _identity(self.runner_off) if self.runner_off else "hide_sme.so",
            **software_fingerprint(),
        }
        label = " ".join(
            facts.properties.get(key, "") for key in ("model", "soc") if key in facts.properties
        )
        label = f"android device {self.serial}" + (f" ({label})" if label else "")
        limits: dict[str, str] = {}
        if not facts.has_sme2:
            reason = f"{label} has no SME2 (/proc/cpuinfo Features lack sme2)"
            limits = {"speedup": reason, "sme2": reason}
        elif Variant.OFF not in variants:
            limits["speedup"] = (
                f"{label}: no SME2-off variant; pass --sme2-runner-off or set {NDK_ENV} to "
                "build the getauxval shim"
            )
        return DeviceInfo(
            name=self.label,
            fingerprint=fingerprint,
            machine_class=machine_class,
            has_sme2=facts.has_sme2,
            variants=variants,
            time_meaningful=True,
            limits=limits,
        )

    # -- run ---------------------------------------------------------------------------------

    def run(
        self, model: Path, inputs: Path, variant: Variant, plan: RunPlan, workdir: Path
    ) -> RunResult:
        self._prepared()
        bundle = self._bundles.get(variant)
        if bundle is None:
            raise RunnerError(f"android device {self.serial} cannot run {variant}")
        if self.runner_on is None:
            refuse_without_kernels(model, self.label, "Android")
        remote_model, remote_inputs = self._push_file(model), self._push_file(inputs)
        remote_dir = self.device_dir / "runs" / f"{os.getpid()}-{next(self._runs)}"
        argv = runner_command(
            Path(str(bundle.directory / bundle.runner.name)),
            Path(str(remote_model)),
            Path(str(remote_dir)),
            plan,
            inputs=Path(str(remote_inputs)),
        )
        preload = self._preload if variant is Variant.OFF else None
        pid_file = remote_dir / RUNNER_PID_NAME
        command = shell_command(
            bundle.directory, argv, preload=preload, cpu_mask=self.cpu_mask, pid_file=pid_file
        )
        workdir.mkdir(parents=True, exist_ok=True)
        for name in (TIMINGS_NAME, ETDUMP_NAME, OUTPUTS_NAME, LOGCAT_NAME, LOG_NAME):
            (workdir / name).unlink(missing_ok=True)
        self._shell(f"mkdir -p {shlex.quote(str(remote_dir))}")
        self._adb("logcat", "-c", check=False)  # some devices refuse; the log is then longer
        try:
            result = self._shell(command, check=False, timeout=plan.timeout_s or DEFAULT_TIMEOUT_S)
        except DeviceHung as hung:
            raise DeviceHung(f"{hung}; {self._kill_remote(pid_file)}") from None
        log = result.stdout + result.stderr
        save_log(workdir, log)
        remote = (str(self.adb), "-s", self.serial, "shell", command)
        shown = shlex.join(remote)
        if result.returncode != 0:
            self._fail_run(result.returncode, result.stderr or result.stdout, shown, workdir)
        try:
            names = [TIMINGS_NAME, OUTPUTS_NAME] + ([ETDUMP_NAME] if plan.traced else [])
            for name in names:
                self._adb("pull", str(remote_dir / name), str(workdir / name))
        finally:
            self._shell(f"rm -rf {shlex.quote(str(remote_dir))}", check=False)
        logcat = self._adb("logcat", "-d", "-s", "XNNPACK", check=False).stdout
        self._kernels.add(model, variant, [*log.splitlines(), *logcat.splitlines()])
        return collect_result(workdir, plan, log, remote)

    def _kill_remote(self, pid_file: PurePosixPath) -> str:
        """Kill the runner that ``pid_file`` names on the phone; what happened, as a clause.

        Killing the local ``adb`` (its deadline) ends the shell's connection, not the process on
        the phone, which would go on holding the cores the next case is timed on.
        """
        path = shlex.quote(str(pid_file))
        script = (
            f"pid=$(cat {path}) && if kill -9 $pid 2>/dev/null; then echo killed $pid; "
            f"else echo ended $pid; fi"
        )
        try:
            answer = self._shell(script, check=False, timeout=_KILL_TIMEOUT_S)
        except RunnerError as err:  # hung again, or lost
            return f"the runner on the device could not be killed ({err})"
        said = answer.stdout.split()
        if said[:1] == ["killed"]:
            return f"the runner on the device (pid {said[1]}) was killed"
        if said[:1] == ["ended"]:
            return f"the runner on the device (pid {said[1]}) had ended"
        reason = _tail(answer.stderr or answer.stdout)
        return f"the runner on the device could not be killed (no pid in {pid_file}: {reason})"

    def _fail_run(self, code: int, said: str, shown: str, workdir: Path) -> None:
        """Raise the RunnerError for a failed remote run, with the device log saved beside it."""
        if code == 255:  # adb's own failure, not the runner's exit status
            self._raise_if_lost(_tail(said))
        logcat = self._adb("logcat", "-d", "-t", str(_LOGCAT_LINES), check=False)
        log_path = workdir / LOGCAT_NAME
        log_path.write_text(logcat.stdout)
        last = _tail(logcat.stdout, lines=2)
        raise RunnerError(
            f"runner {_exit_reason(code)} on android device {self.serial}: {runner_tail(said)}; "
            f"full log: {workdir / LOG_NAME}; device log: {log_path} (ends: {last}); "
            f"command: {shown}"
        )

    def evidence(
        self,
        model: Path,
        inputs: Path,
        variant: Variant,
        threads: int,
        workdir: Path,
        *,
        timeout_s: float | None = None,  # no run of its own: kernels come from run()'s logs
    ) -> Sme2Evidence | None:
        """Kernels named in the runs' XNNPACK log lines (Debug runners only), else None."""
        return self._kernels.evidence(model, variant)


def _identity(path: Path | None) -> str:
    if path is None:
        return ""
    stat = path.stat()
    return f"{path.name} {content_key(path.read_bytes())[:12]} ({stat.st_size} bytes)"


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None


def _exit_reason(code: int) -> str:
    """A remote shell reports a signal as 128 + its number; subprocess's way is its negative."""
    return exit_reason(128 - code if code > 128 else code)


def _tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "(no output)"
