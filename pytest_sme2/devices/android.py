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

Everything that can go wrong on a phone — no such device, its adb server gone (a lab host's:
``server=``), a runner crash, the USB cable — fails the test with a one-line :class:`RunnerError`
naming what happened and a file holding the device log (``logcat``).
"""

from __future__ import annotations

import itertools
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import ClassVar

from pytest_sme2.cache import content_key
from pytest_sme2.devices.adb import SERIAL_ENV, SERVER_OPTION, Adb, AdbServer, tail
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
from pytest_sme2.devices.base import Device, OptionGetter, RunRequest
from pytest_sme2.devices.host import isa_features, software_class, software_fingerprint
from pytest_sme2.devices.kernel_log import KernelLogs
from pytest_sme2.devices.runner_pair import RUNNER_SPEC_KEYS, add_runner_options
from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.evidence import Sme2Evidence
from pytest_sme2.runner.invoke import (
    DEFAULT_TIMEOUT_S,
    ETDUMP_NAME,
    LOG_NAME,
    OUTPUTS_NAME,
    TIMINGS_NAME,
    RunnerCall,
    RunResult,
    collect_result,
    exit_reason,
    runner_command,
    runner_tail,
    save_log,
)
from pytest_sme2.runner.kernel_libraries import refuse_without_kernels

DEFAULT_DEVICE_DIR = "/data/local/tmp/pytest-sme2"

LOGCAT_NAME = "logcat.txt"
RUNNER_PID_NAME = "runner.pid"
_LOGCAT_LINES = 400


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
        adb: Adb | None = None,
        device_dir: str = DEFAULT_DEVICE_DIR,
        cpu_mask: str | None = None,
        runner_on: Path | None = None,
        runner_off: Path | None = None,
        shim: Path | None = None,
        ndk: Path | None = None,
    ) -> None:
        """``adb`` reaches the phone (default: ``adb`` to the only device adb's own server
        lists). ``shim`` is a prebuilt arm64 ``hide_sme.so``; without it and without
        ``runner_off`` it is built with ``ndk`` (default ``$ANDROID_NDK``) when there is one."""
        self.adb = adb or Adb()
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

    @property
    def serial(self) -> str | None:
        """The device's serial: as given, else the only device adb lists (once prepared)."""
        return self.adb.serial

    spec_keys: ClassVar[Mapping[str, str]] = {
        "serial": "sme2_adb_serial",
        "adb": "sme2_adb",
        "server": "sme2_adb_server",
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
            SERVER_OPTION,
            dest="sme2_adb_server",
            default=None,
            help="android: HOST:PORT of the adb server the phone is plugged into, e.g. a lab "
            "machine's (default: $ADB_SERVER_SOCKET, else adb's own localhost:5037)",
        )
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
        on, off, server = get("sme2_runner_on"), get("sme2_runner_off"), get("sme2_adb_server")
        return cls(
            adb=Adb(
                get("sme2_adb") or "adb",
                serial=get("sme2_adb_serial") or os.environ.get(SERIAL_ENV) or None,
                server=AdbServer.parse(server) if server else None,
            ),
            device_dir=get("sme2_android_dir") or DEFAULT_DEVICE_DIR,
            cpu_mask=get("sme2_cpu_mask"),
            runner_on=Path(on).expanduser() if on else None,
            runner_off=Path(off).expanduser() if off else None,
        )

    def _push_file(self, local: Path) -> PurePosixPath:
        """Push a model or inputs file once per session (keyed by path, size and mtime)."""
        stat = local.stat()
        key = (str(local.resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in self._pushed:
            remote = self.device_dir / "files" / content_key(*map(str, key)) / local.name
            self.adb.shell(f"mkdir -p {shlex.quote(str(remote.parent))}")
            self.adb.push(local, remote)
            self._pushed[key] = remote
        return self._pushed[key]

    # -- prepare -----------------------------------------------------------------------------

    def prepare(self) -> None:
        if self._facts is not None:
            return
        self.adb.serial = self.adb.ready_serial()
        if self.runner_on is None:
            raise ConfigError(
                "the android device needs --sme2-runner-on: sme2_runner built for Android "
                "arm64 with the NDK (see docs/devices.md, 'android')"
            )
        facts = parse_device_facts(self.adb.shell(FACTS_COMMAND).stdout)
        self.adb.shell(f"mkdir -p {shlex.quote(str(self.device_dir))}")
        if not facts.has_sme2:  # without SME2 on the CPU, any runner runs SME2-off
            off = self.runner_off or self.runner_on
            self._bundles[Variant.OFF] = self._push_bundle(off, "sme2-off")
        else:
            self._bundles[Variant.ON] = self._push_bundle(self.runner_on, "sme2-on")
            if self.runner_off is not None:
                self._bundles[Variant.OFF] = self._push_bundle(self.runner_off, "sme2-off")
            elif shim := self.shim or (build_android_shim(self.ndk) if self.ndk else None):
                self._preload = self.device_dir / "hide_sme.so"
                self.adb.push(shim, self._preload)
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
        self.adb.shell(f"mkdir -p {shlex.quote(str(directory))}")
        for path in (runner, *libraries.values()):
            self.adb.push(path, directory / (runner.name if path == runner else path.name))
        self.adb.shell(f"chmod 755 {shlex.quote(str(directory / runner.name))}")
        return _Bundle(directory, runner)

    def _prepared(self) -> DeviceFacts:
        self.prepare()
        assert self._facts is not None
        return self._facts

    # -- info --------------------------------------------------------------------------------

    def describe(self) -> DeviceInfo:
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
            "adb_server": self.adb.server_name,
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

    def run(self, request: RunRequest) -> RunResult:
        remote_dir = self.device_dir / "runs" / f"{os.getpid()}-{next(self._runs)}"
        command = self._command(request, remote_dir)
        workdir, plan = request.workdir, request.executions
        workdir.mkdir(parents=True, exist_ok=True)
        for name in (TIMINGS_NAME, ETDUMP_NAME, OUTPUTS_NAME, LOGCAT_NAME, LOG_NAME):
            (workdir / name).unlink(missing_ok=True)
        self.adb.shell(f"mkdir -p {shlex.quote(str(remote_dir))}")
        self.adb("logcat", "-c", check=False)  # some devices refuse; the log is then longer
        timeout = plan.timeout_s or DEFAULT_TIMEOUT_S
        result = self.adb.run_killable(command, remote_dir / RUNNER_PID_NAME, timeout)
        log = result.stdout + result.stderr
        save_log(workdir, log)
        shown = self.adb.command("shell", command)
        if result.returncode != 0:
            said = result.stderr or result.stdout
            self._fail_run(result.returncode, said, shlex.join(shown), workdir)
        try:
            names = [TIMINGS_NAME, OUTPUTS_NAME] + ([ETDUMP_NAME] if plan.traced else [])
            for name in names:
                self.adb("pull", str(remote_dir / name), str(workdir / name))
        finally:
            self.adb.shell(f"rm -rf {shlex.quote(str(remote_dir))}", check=False)
        logcat = self.adb("logcat", "-d", "-s", "XNNPACK", check=False).stdout
        lines = [*log.splitlines(), *logcat.splitlines()]
        self._kernels.add(request.program, request.variant, lines)
        return collect_result(workdir, plan, log, shown)

    def _command(self, request: RunRequest, remote_dir: PurePosixPath) -> str:
        """The ``adb shell`` command line that runs ``request`` on the phone, its program and
        inputs pushed (once) and its files written to ``remote_dir``."""
        self._prepared()
        variant = request.variant
        bundle = self._bundles.get(variant)
        if bundle is None:
            raise RunnerError(f"android device {self.serial} cannot run {variant}")
        if self.runner_on is None:
            refuse_without_kernels(request.program, self.label, "Android")
        assert request.inputs is not None, "a device runs a program on its inputs"
        remote = RunnerCall(
            Path(str(self._push_file(request.program))),
            Path(str(self._push_file(request.inputs))),
            request.executions,
            Path(str(remote_dir)),
        )
        argv = runner_command(Path(str(bundle.directory / bundle.runner.name)), remote)
        return shell_command(
            bundle.directory,
            argv,
            preload=self._preload if variant is Variant.OFF else None,
            cpu_mask=self.cpu_mask,
            pid_file=remote_dir / RUNNER_PID_NAME,
        )

    def _fail_run(self, code: int, said: str, shown: str, workdir: Path) -> None:
        """Raise the RunnerError for a failed remote run, with the device log saved beside it."""
        self.adb.raise_if_adb_failed(code, said)
        logcat = self.adb("logcat", "-d", "-t", str(_LOGCAT_LINES), check=False)
        log_path = workdir / LOGCAT_NAME
        log_path.write_text(logcat.stdout)
        last = tail(logcat.stdout, lines=2)
        raise RunnerError(
            f"runner {_exit_reason(code)} on android device {self.serial}: {runner_tail(said)}; "
            f"full log: {workdir / LOG_NAME}; device log: {log_path} (ends: {last}); "
            f"command: {shown}"
        )

    def evidence(self, request: RunRequest) -> Sme2Evidence | None:
        """Kernels named in the runs' XNNPACK log lines (Debug runners only), else None: no run
        of its own."""
        return self._kernels.evidence(request.program, request.variant)


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
