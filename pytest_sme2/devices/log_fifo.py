"""A FIFO read in a thread while a process writes it: qemu's exec log (hundreds of MB per
inference, gigabytes for a program that loads torch) streamed into the counter, never onto the disk,
and read in large, lazy reads (:func:`open_log`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")

#: The reading buffer, and what a FIFO's pipe is enlarged to (Linux's default limit for an
#: unprivileged process, ``/proc/sys/fs/pipe-max-size``).
BUFFER = 1 << 20
#: How long the reader of a FIFO waits after a read that found a pipe of :data:`BUFFER` bytes less
#: than a quarter full (a smaller pipe, in proportion): qemu fills about 0.1 MB a millisecond.
NAP_S = 0.001


def open_log(path: Path) -> BinaryIO:
    """``path`` opened for reading in :data:`BUFFER`-sized reads; a FIFO read lazily.

    Why: qemu line-buffers its log, so every executed block is one ``write(2)``, and a reader
    always waiting on the pipe wakes for each: counting a 376 MB log of toy_cnn (4.3 million
    lines), the reader spent 3.0 s of CPU in 228,625 reads, as much as qemu itself. With the pipe
    enlarged to 1 MiB and a 1 ms nap whenever a read found it less than a quarter full, the lines
    pile up between reads: 1,684 reads, 0.27 s, and qemu no slower (EPYC 26/2, 2 vCPUs). A
    whole counted run (qemu and the counter, ``benchmarks/evidence_cost.py``'s "count CPU s"):
    toy_cnn 7.6 → 4.8 s, squeezesam_like 20.6 → 15.6 s SME2-on and 27.2 → 17.7 s SME2-off.
    Raises OSError as ``open`` does.
    """
    return io.BufferedReader(_LogFile(path), buffer_size=BUFFER)


class _LogFile(io.FileIO):
    """A log opened for reading; a FIFO's reads nap after reading little (:func:`open_log`)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, "rb")
        self._nap_s = self._pipe_size = 0.0  # a regular file: no nap
        if stat.S_ISFIFO(os.fstat(self.fileno()).st_mode):
            self._pipe_size = _enlarge_pipe(self.fileno())
            self._nap_s = NAP_S * self._pipe_size / BUFFER  # a full pipe stops qemu's writes

    def readinto(self, buffer: Any) -> int | None:
        read = super().readinto(buffer)
        if read and read < self._pipe_size / 4:
            time.sleep(self._nap_s)  # the next read finds the lines written meanwhile
        return read


def _enlarge_pipe(fd: int) -> int:
    """The pipe behind ``fd`` made to hold :data:`BUFFER` bytes where the system lets it; its
    size in bytes."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or above its limit
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, BUFFER)  # the size it got
    try:
        return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    except (AttributeError, OSError):
        return 1 << 16  # Linux's default


def read_while(fifo: Path, read: Callable[[], _T], run: Callable[[], _R]) -> tuple[_T, _R]:
    """``read()`` the FIFO in a thread while ``run()`` writes it; both results, ``run``'s error
    wins.

    qemu opens the log when it starts; if it never does (it could not start) or the reader stops
    early, the reader would block forever, so after ``run`` returns the FIFO is opened for
    writing and closed until the reader has finished: that is an end of file to a blocked
    reader, and nothing to a finished one.
    """
    outcome: dict[str, Any] = {}

    def reader() -> None:
        try:
            outcome["value"] = read()
        except Exception as err:  # re-raised in the caller's thread below
            outcome["error"] = err
            with fifo.open("rb") as rest:  # qemu must not block on a full pipe
                while rest.read(1 << 20):
                    pass

    thread = threading.Thread(target=reader, name="qemu-exec-log", daemon=True)
    thread.start()
    try:
        ran = run()
    finally:
        while thread.is_alive():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as err:
                if err.errno != errno.ENXIO:  # ENXIO: no reader has it open right now
                    raise
            thread.join(timeout=0.1)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"], ran
