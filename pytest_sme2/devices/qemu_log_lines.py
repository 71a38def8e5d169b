"""qemu's debug log as the pieces its counter takes (:mod:`pytest_sme2.devices.qemu_log`): runs
of ``Trace`` lines, and every other line whole — a system call's entry rejoined with its return
where a thread pool's other thread printed between them.

Apart from the counter because this is how the log is *read* (chunks, runs, rejoined lines) and
the counter is what its lines *mean*.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

#: The newline before a line that is not a ``Trace`` line (or the log's last newline).
_RUN_END = re.compile(rb"\n(?!Trace )")
#: A system call's entry, as strace prints it before the call returns: ``14760 futex(…)``
_SYSCALL_ENTRY = re.compile(rb"\d+ [a-z_0-9]+\(")
#: A system call's return printed on its own line: ``" = 0 ({tv_sec = 289,tv_nsec = 7663})"``
_RETURN = b" = "


def pieces(handle: BinaryIO) -> Iterator[bytes]:
    """The log in order as pieces: each a run of consecutive ``Trace`` lines, or one other line
    (with their newlines; a last line without one is given one), a system call's line whole.

    Why: nine lines in ten are ``Trace`` lines, one per executed block, and a Python loop taking
    them one by one cost about 0.26 µs a line: more than a quarter of a counted run's CPU beside
    qemu's. Split and tallied as runs, they cost C code's time (``re``, ``bytes.split``,
    ``Counter``); the shapes of blocks and the system calls still come line by line, in order.

    With a thread pool, qemu prints a system call's entry and its return apart, and another
    thread's lines come between: ``14760 futex(…)Trace 0: …`` then, later, `` = 0`` alone.
    Taken as they come, the glued ``Trace`` line went uncounted and a ``clock_gettime`` lost
    its value, so its event could not be split (a two-thread count failed so in a CI run).
    :class:`_Returns` rejoins each entry with its return, where the return is printed.
    """
    carry = b""
    returns = _Returns()
    while True:
        chunk = handle.read(_CHUNK)
        if not chunk:
            if not carry:
                yield from returns.unreturned()
                return
            chunk = b"\n"  # a last line without its newline ends there
        text = carry + chunk
        end = text.rfind(b"\n") + 1
        text, carry = text[:end], text[end:]
        at = 0
        while at < end:
            if text.startswith(b"Trace ", at):
                stop = _RUN_END.search(text, at)
                assert stop is not None, "the text ends with a newline"
                after = stop.end()
            else:
                after = text.index(b"\n", at) + 1
                glued = text.find(b"Trace ", at, after)
                if glued > at and _SYSCALL_ENTRY.match(text, at):
                    returns.enter(text[at:glued])
                    at = glued
                    continue
                if text.startswith(_RETURN, at) and returns:
                    yield returns.returned(text[at:after])
                    at = after
                    continue
            yield text[at:after]
            at = after


class _Returns:
    """The system-call entries printed without their return, waiting for it (see
    :func:`pieces`). A return line names no thread: a ``clock_gettime`` value goes to the
    latest ``clock_gettime`` waiting, any other return to the earliest other entry."""

    def __init__(self) -> None:
        self._waiting: list[bytes] = []

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def enter(self, entry: bytes) -> None:
        self._waiting.append(entry)

    def returned(self, line: bytes) -> bytes:
        """The entry ``line`` returns, joined with it into one line."""
        clock = b"tv_sec" in line
        matching = [i for i, e in enumerate(self._waiting) if (b" clock_gettime(" in e) == clock]
        index = (matching[-1] if clock else matching[0]) if matching else 0
        return self._waiting.pop(index) + line

    def unreturned(self) -> Iterator[bytes]:
        """The entries that never returned (``exit``), each as a line of its own."""
        yield from (entry + b"\n" for entry in self._waiting)
        self._waiting.clear()


_CHUNK = 1 << 20
