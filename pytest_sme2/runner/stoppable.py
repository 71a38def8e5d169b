"""Runner calls another thread can stop: the process group each thread has running, and a stop
that kills it and refuses the thread's next one.

Why: an emulated case runs its SME2-on and SME2-off variants side by side
(:mod:`pytest_sme2.measure.side_by_side`), each a runner under qemu started by a thread of its own.
Ctrl-C and SIGTERM (:mod:`pytest_sme2.interrupt`) reach the main thread only: its runner call
kills its own group (:func:`pytest_sme2.runner.invoke.run_process`), and without a stop the other
thread's qemu would count on for minutes, then start the next run of its variant.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence

from pytest_sme2.errors import RunnerError

_LOCK = threading.Lock()
#: thread ident → the leader of the process group its runner call has running
_RUNNING: dict[int, subprocess.Popen[str]] = {}
#: threads stopped, until :func:`release`
_STOPPED: set[int] = set()


class Stopped(RunnerError):
    """A runner call of a thread another thread stopped."""


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group ``proc`` leads (started with ``start_new_session``)."""
    with contextlib.suppress(ProcessLookupError):  # already gone, group and all
        os.killpg(proc.pid, signal.SIGKILL)


def refuse_if_stopped(command: Sequence[str]) -> None:
    """Raise :class:`Stopped` before ``command`` starts if this thread was stopped."""
    if threading.get_ident() in _STOPPED:
        raise Stopped(f"stopped before it started: {shlex.join(command)}")


@contextlib.contextmanager
def running(proc: subprocess.Popen[str], command: Sequence[str]) -> Iterator[None]:
    """``proc`` known as this thread's running call while inside: a :func:`stop` kills its group
    (at once if the thread was stopped as it started), and the call then raises
    :class:`Stopped` rather than return what a killed runner left."""
    me = threading.get_ident()
    with _LOCK:
        _RUNNING[me] = proc
        stopped = me in _STOPPED
    try:
        if stopped:
            kill_group(proc)
        yield
    finally:
        with _LOCK:
            del _RUNNING[me]
            stopped = me in _STOPPED
    if stopped:
        raise Stopped(f"stopped by another thread: {shlex.join(command)}")


def stop(thread: int | None) -> None:
    """Kill the group ``thread`` has running and refuse its next runner calls until
    :func:`release`."""
    if thread is None:  # never started
        return
    with _LOCK:
        _STOPPED.add(thread)
        proc = _RUNNING.get(thread)
    if proc is not None:
        kill_group(proc)


def release(thread: int | None) -> None:
    """Forget a stop of ``thread`` once it has ended (its ident may be reused)."""
    with _LOCK:
        _STOPPED.discard(thread)  # type: ignore[arg-type]
