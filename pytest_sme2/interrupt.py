"""SIGTERM ends a session the way Ctrl-C does: in order, not by vanishing.

CI cancels a job, and a batch system ends one over time, with SIGTERM, whose default action ends
Python at once: no ``finally`` runs, so a runner's process group is left running (qemu for
minutes, a phone's runner holding its cores) and the session report.md is never written.
Turned into a ``KeyboardInterrupt``, it unwinds like Ctrl-C: the runner call in progress kills
its process group (:func:`pytest_sme2.runner.invoke.run_process`), pytest reports the session as
interrupted, and the session hooks write report.md with every case judged so far. Baselines are
written atomically, so none is left half-written either way.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType


class Terminated(KeyboardInterrupt):
    """The session received SIGTERM."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated(
        # Says nothing of report.md: a session stopped before any case was judged has none, and
        # one that has it names it in its summary ("pytest-sme2 session report: ...").
        "SIGTERM: pytest-sme2 stopped the session as Ctrl-C would: no runner is left running"
    )


def _terminate_passing_on(signum: int, frame: FrameType | None) -> None:
    for child in children():
        with contextlib.suppress(OSError):  # it ended since
            os.kill(child, signal.SIGTERM)
    _terminate(signum, frame)


def children(pid: int | None = None) -> list[int]:
    """The child processes of ``pid``, this process by default (Linux's
    ``/proc/PID/task/*/children``; none elsewhere)."""
    found = []
    for listing in glob.glob(f"/proc/{pid or 'self'}/task/*/children"):
        try:
            with open(listing) as handle:
                found += [int(pid) for pid in handle.read().split()]
        except OSError:  # its thread ended
            pass
    return found


def unwind_on_sigterm(*, pass_on: bool = False) -> Callable[[], None]:
    """Make SIGTERM raise :class:`Terminated` in the main thread; returns what undoes it.

    Only where SIGTERM still has its default action: a handler someone else installed (a CI
    wrapper, another plugin) is theirs, and is left alone.

    ``pass_on``: the xdist controller's, which first sends SIGTERM on to its child processes,
    its local workers, so each unwinds at once, as Ctrl-C in a terminal reaches them all. A
    ``kill`` of the controller alone otherwise left a worker inside a runner call until execnet
    interrupted it, 5 s after xdist's teardown asked, while that teardown waits 10 s: the session
    took ~14 s to end, and a CI that sends SIGKILL a few seconds after SIGTERM would cut it short.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None
    signal.signal(signal.SIGTERM, _terminate_passing_on if pass_on else _terminate)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)
