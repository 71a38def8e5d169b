"""A FIFO read in a thread while a process writes it: qemu's exec log (hundreds of MB per
inference, gigabytes for a program that loads torch) streamed into the counter, never onto the disk.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")


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
