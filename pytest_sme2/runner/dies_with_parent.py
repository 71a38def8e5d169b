"""Every process a session starts dies with it: SIGKILL armed for when its parent dies (Linux).

A kill -9 of pytest runs no ``finally``, so nothing else would stop a runner, or a qemu that
hangs, from running on for minutes, re-parented to PID 1. ``prctl(PR_SET_PDEATHSIG)`` has to be
called in the new process before it execs the command, and there are two ways to do that:

- ``dies_with_parent.c``, compiled once with the machine's ``cc`` and cached: subprocess starts
  it with ``vfork``, it arms the signal and execs the command. 1.0 ms a process.
- Python's ``preexec_fn``, where no C compiler is at hand: the same guarantee, but a
  ``preexec_fn`` makes subprocess ``fork`` the whole session, page tables of torch and ExecuTorch
  and all: 39 ms a process (measured in a process that had imported them), and the copy-on-write
  faults after it are paid in the session's own time. A host session starts ~20 runner
  processes a case: 12.8 s of a 56 s warm example suite went there (py-spy).

Either way the new process checks that its parent is still the session: a parent that died
before the signal was armed would never send it, and the process then ends at once.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_sme2.cache import cache_root, cached_dir, content_key

SOURCE = Path(__file__).resolve().parent / "dies_with_parent.c"

#: ``prctl`` option: the signal a process gets when the thread that started it ends
#: (linux/prctl.h). Kept across ``exec`` (qemu, a wrapper script that execs the runner).
PR_SET_PDEATHSIG = 1

#: What the program writes last when it cannot exec the command (its exit status is then 127).
_EXEC_FAILED = re.compile(r"\ndies_with_parent: exec errno (\d+)\n\Z")

_COMPILE_TIMEOUT_S = 60.0


def guarded(command: Sequence[str]) -> tuple[list[str], Callable[[], None] | None]:
    """``command`` as it should be started so that it dies with this process, and the
    ``preexec_fn`` to start it with (None: none needed, subprocess may ``vfork``)."""
    if not sys.platform.startswith("linux"):
        return list(command), None
    program = _program(cache_root())
    if program is not None and not program.is_file():  # its cache was removed since
        _program.cache_clear()
        program = _program(cache_root())
    if program is None:
        return list(command), _armed_in_child()
    return [str(program), str(os.getpid()), *command], None


def raise_if_not_started(returncode: int, stderr: str, command: Sequence[str]) -> None:
    """Raise the OSError that starting ``command`` directly would have raised, if the guard
    program said it could not exec it."""
    if returncode != 127:
        return
    failed = _EXEC_FAILED.search(stderr)
    if failed:
        number = int(failed.group(1))
        raise OSError(number, os.strerror(number), command[0])


@functools.cache
def _program(root: Path) -> Path | None:
    """The compiled guard, built on first use into the cache ``root``, keyed by its source and
    compiler; None where there is no C compiler or it fails (then :func:`_armed_in_child` does
    the same, slower)."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        return None
    real = Path(compiler).resolve()
    source = SOURCE.read_bytes()
    key = content_key(source, str(real), str(real.stat().st_mtime_ns), os.uname().machine)

    def build(out: Path) -> None:
        command = [compiler, "-O2", "-Wall", "-o", str(out / "dies_with_parent"), str(SOURCE)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip()[-300:])

    try:
        entry = cached_dir(root / "tools" / f"dies-with-parent-{key}", build)
    except (OSError, RuntimeError, subprocess.TimeoutExpired):
        return None
    return entry / "dies_with_parent"


def _armed_in_child() -> Callable[[], None]:
    """What a new process runs before ``exec``: SIGKILL to it when its parent dies, then the
    check that the parent is still there."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork, not in it
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm
