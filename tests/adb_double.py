#!/usr/bin/env python3
"""A stand-in for ``adb`` that maps one device onto a local directory and *really runs* what
``adb shell`` is asked to run, so the android device is tested end to end without a phone.

Why not canned output: the android device's job is moving files, building the remote command and
reading what the runner wrote; only a real runner on the far side tests all three. Device paths
(``/data/...``, ``/proc/...``, ``/system/...``) are rewritten into the root directory and the
command runs under ``sh -c``. An aarch64 runner runs under qemu (``qemu`` in the config), so the
same binary with and without SME2 can be driven through this "adb".

Set up by :func:`install` (tests call it): ``ADB_DOUBLE_ROOT`` names the root, whose ``.double/``
holds ``config.json`` (serial, failures to simulate, qemu prefix), ``build.prop`` (what
``getprop`` answers), ``logcat.txt`` (the device log) and ``calls`` (a counter). ``proc/cpuinfo``
under the root is the device's CPU description. Failures it simulates, as a phone shows them:

* ``lose_after_calls: N`` — from the N+1-th adb call on, the device is unplugged;
* ``lose_during_run: true`` — the next runner invocation dies with the connection (exit 255);
* ``kill_runner_with: "SIGSEGV"`` — the next runner process gets that signal once it is running,
  and logcat gets the line Android's debuggerd writes;
* ``hang_runner: true`` — the next runner gets stuck (stopped, as in an uninterruptible kernel
  call) and its shell never answers;
* ``server: "HOST:PORT"`` — the device sits behind that adb server (a lab machine's): a call that
  names another with ``-H``/``-P``, or none, cannot reach it and fails as adb does;
  ``server_gone: true`` — that server went away: every call fails so.

Each call's server (``HOST:PORT`` from its ``-H``/``-P``, ``default`` without them) is appended
to ``.double/servers`` (:func:`servers_seen`), so a test sees that every call named it.

As on a phone, what ``adb shell`` starts is not in adb's process group (it runs in a session of
its own): killing the local adb leaves it running, and only a kill sent through adb ends it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

_DEVICE_PATH = re.compile(r"(?<![\w/.])(/(?:data|proc|system|sdcard)(?=/|\b))")
_AARCH64 = 183  # e_machine
_REPO = Path(__file__).resolve().parents[1]
#: the caller's PYTHONPATH, kept aside while the double's own names the repository
_SAVED = "ADB_DOUBLE_PYTHONPATH"


def install(
    root: Path,
    *,
    serial: str,
    cpuinfo: str,
    properties: dict[str, str],
    qemu: list[str] | None = None,
) -> Path:
    """Create a device under ``root`` and an ``adb`` executable for it; returns the executable."""
    state = root / ".double"
    (state / "bin").mkdir(parents=True, exist_ok=True)
    (root / "proc").mkdir(exist_ok=True)
    (root / "data/local/tmp").mkdir(parents=True, exist_ok=True)
    (root / "proc/cpuinfo").write_text(cpuinfo)
    (state / "build.prop").write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    (state / "logcat.txt").write_text("")
    (state / "calls").write_text("0")
    configure(root, serial=serial, qemu=qemu)
    getprop = state / "bin/getprop"
    getprop.write_text(f'#!/bin/sh\nsed -n "s/^$1=//p" "{state / "build.prop"}"\n')
    getprop.chmod(0o755)
    adb = state / "adb"
    # ``python -S`` with its two import roots named: site's .pth files cost 26 ms a process and
    # filelock's import 36 ms, of ~95 ms an adb call took, thousands of calls a test run; the
    # caller's PYTHONPATH is restored for what the call runs.
    paths = os.pathsep.join((str(_REPO), sysconfig.get_paths()["purelib"]))
    adb.write_text(
        f'#!/bin/sh\nADB_DOUBLE_ROOT="{root}" {_SAVED}="${{PYTHONPATH-}}" PYTHONPATH="{paths}" '
        f'exec "{sys.executable}" -S "{Path(__file__)}" "$@"\n'
    )
    adb.chmod(0o755)
    return adb


def servers_seen(root: Path) -> list[str]:
    """The server each call so far named, in order."""
    path = root / ".double/servers"
    return path.read_text().splitlines() if path.is_file() else []


def configure(root: Path, **changes: object) -> None:
    """Change the double's behaviour (``lose_after_calls``, ``kill_runner_with``, ...)."""
    path = root / ".double/config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    config.update(changes)
    # imported here, not at the top: a call's start-up stays the standard library's (install)
    from pytest_sme2.cache import write_atomic

    write_atomic(path, json.dumps(config))  # read by every call, maybe at this very moment


class Double:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / ".double"
        self.config = json.loads((self.state / "config.json").read_text())
        self.serial: str = self.config["serial"]

    # -- device state ----------------------------------------------------------------------

    def count_call(self, server: str) -> int:
        """This call's number, its ``server`` recorded; under a lock, since two sessions' workers
        may call at once."""
        with (self.state / "calls.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
            calls = int((self.state / "calls").read_text()) + 1
            (self.state / "calls").write_text(str(calls))
            with (self.state / "servers").open("a") as servers:
                servers.write(f"{server}\n")
        return calls

    def unreachable(self, server: str) -> bool:
        """Whether a call naming ``server`` cannot reach this device's server (as adb says it)."""
        expected = self.config.get("server")
        if expected is None or (server == expected and not self.config.get("server_gone")):
            return False
        address = "localhost:5037" if server == "default" else server
        print(
            "* cannot start server on remote host\nerror: cannot connect to daemon at "
            f"tcp:{address}: failed to connect to '{address}': Connection refused",
            file=sys.stderr,
        )
        return True

    def gone(self, calls: int) -> bool:
        lose = self.config.get("lose_after_calls")
        return bool(self.config.get("gone")) or (lose is not None and calls > lose)

    def log(self, level: str, tag: str, message: str, pid: int = 0) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S") + f".{int(time.time() * 1000) % 1000:03d}"
        with (self.state / "logcat.txt").open("a") as handle:
            handle.write(f"{stamp} {pid:5d} {pid:5d} {level} {tag:<8}: {message}\n")

    def local(self, device_path: str) -> Path:
        return self.root / device_path.lstrip("/")

    # -- commands --------------------------------------------------------------------------

    def main(self, argv: list[str]) -> int:
        given = {}
        while argv[:1] in (["-s"], ["-H"], ["-P"]):  # adb's global options, before the command
            given[argv[0]], argv = argv[1], argv[2:]
        serial = given.get("-s")
        server = "default"
        if "-H" in given or "-P" in given:
            server = f"{given.get('-H', 'localhost')}:{given.get('-P', '5037')}"
        calls = self.count_call(server)
        if self.unreachable(server):
            return 1
        gone = self.gone(calls)
        if argv[:1] == ["devices"]:
            print("List of devices attached")
            if not gone:
                print(f"{self.serial}\tdevice")
            return 0
        if (serial is not None and serial != self.serial) or gone:
            print(f"adb: device '{serial or self.serial}' not found", file=sys.stderr)
            return 1
        command, args = argv[0], argv[1:]
        handler = {
            "push": self.push,
            "pull": self.pull,
            "shell": self.shell,
            "logcat": self.logcat,
            "get-state": lambda _: print("device") or 0,
        }.get(command)
        if handler is None:
            print(f"adb double: unsupported command {command!r}", file=sys.stderr)
            return 1
        return handler(args)

    def push(self, args: list[str]) -> int:
        local, remote = Path(args[0]), self.local(args[1])
        if remote.is_dir():
            remote = remote / local.name
        if not remote.parent.is_dir():
            print(f"adb: error: failed to copy '{args[0]}' to '{args[1]}'", file=sys.stderr)
            return 1
        shutil.copyfile(local, remote)
        print(f"{args[0]}: 1 file pushed, 0 skipped.")
        return 0

    def pull(self, args: list[str]) -> int:
        remote, local = self.local(args[0]), Path(args[1])
        if not remote.is_file():
            print(
                f"adb: error: failed to stat remote object '{args[0]}': No such file or directory",
                file=sys.stderr,
            )
            return 1
        shutil.copyfile(remote, local)
        print(f"{args[0]}: 1 file pulled, 0 skipped.")
        return 0

    def logcat(self, args: list[str]) -> int:
        log = self.state / "logcat.txt"
        if "-c" in args:
            log.write_text("")
            return 0
        lines = log.read_text().splitlines()
        if "-s" in args:
            tags = set(args[args.index("-s") + 1 :])
            lines = [line for line in lines if line.split()[5] in tags]
        if "-t" in args:
            lines = lines[-int(args[args.index("-t") + 1]) :]
        print("\n".join(lines))
        return 0

    def shell(self, args: list[str]) -> int:
        command = _DEVICE_PATH.sub(lambda m: str(self.root) + m[1], " ".join(args))
        runner = "--model_path" in command
        if runner and self.config.get("qemu"):
            command = self.under_qemu(command)
        env = {**os.environ, "PATH": f"{self.state / 'bin'}:{os.environ['PATH']}"}
        proc = subprocess.Popen(
            ["sh", "-c", command],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # the phone's process, not the adb client's
        )
        if runner and self.config.get("hang_runner"):
            configure(self.root, hang_runner=False)
            stuck = _wait_for_runner(proc.pid)
            if stuck is not None:
                os.kill(stuck, signal.SIGSTOP)
            while True:  # until the android device's deadline kills this adb
                time.sleep(3600)
        if runner and self.config.get("lose_during_run"):
            _wait_for_runner(proc.pid)
            proc.kill()
            proc.communicate()
            configure(self.root, gone=True, lose_during_run=False)
            return 255  # what adb returns when the connection drops under a shell
        crashed = None
        if runner and (name := self.config.get("kill_runner_with")):
            configure(self.root, kill_runner_with=None)
            crashed = _wait_for_runner(proc.pid)
            if crashed is not None:
                os.kill(crashed, signal.Signals[name])
        out, err = proc.communicate()
        sys.stdout.write(out.decode(errors="replace"))
        sys.stderr.write(err.decode(errors="replace"))
        if runner:
            for line in err.decode(errors="replace").splitlines():
                self.log("I", "ExecuTorch", line, proc.pid)
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        if crashed is not None and code > 128:
            number = code - 128
            name = signal.Signals(number).name
            self.log("F", "libc", f"Fatal signal {number} ({name}) in tid {crashed}", crashed)
        return code

    def under_qemu(self, command: str) -> str:
        """Prefix the aarch64 executable that the command runs with the configured qemu."""
        words = command.split(" ")
        for i, word in enumerate(words):
            path = Path(word.strip("'"))
            if path.is_file() and _elf_machine(path) == _AARCH64:
                words[i] = " ".join(self.config["qemu"]) + " " + word
                break
        return " ".join(words)


def _elf_machine(path: Path) -> int | None:
    with path.open("rb") as handle:
        head = handle.read(20)
    return int.from_bytes(head[18:20], "little") if head[:4] == b"\x7fELF" else None


def _wait_for_runner(pid: int, timeout_s: float = 30) -> int | None:
    """The pid of the runner process started under ``pid`` (itself, or a child), once running."""
    from pytest_sme2.interrupt import children  # a call's start-up stays the standard library's

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for candidate in (pid, *children(pid)):
            try:
                cmdline = Path(f"/proc/{candidate}/cmdline").read_bytes()
            except OSError:
                continue
            if b"--model_path" in cmdline and not cmdline.startswith(b"sh\0"):
                return candidate
        time.sleep(0.005)
    return None


if __name__ == "__main__":
    os.environ["PYTHONPATH"] = os.environ.pop(_SAVED, "")
    if not os.environ["PYTHONPATH"]:
        del os.environ["PYTHONPATH"]
    sys.exit(Double(Path(os.environ["ADB_DOUBLE_ROOT"])).main(sys.argv[1:]))
