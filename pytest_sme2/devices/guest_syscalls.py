"""What a qemu log's system calls (``-d strace``) tell: the files the guest opened, and where it
mapped their code.

Why a module of its own: the counter (:mod:`pytest_sme2.devices.qemu_log`) reads them to
attribute instructions to libraries and to find the marker functions' entries, and a probe run
logged with system calls only reads them to learn the layout (:func:`code_layout`) that narrows
a later count's log (:mod:`pytest_sme2.devices.exec_filter`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.errors import TraceError

_OPENAT = re.compile(rb'^\d+ openat\(\w+,"((?:[^"\\]|\\.)*)",[^)]*\) = (\d+)$')
_CLOSE = re.compile(rb"^\d+ close\((\d+)\) = 0$")
_MMAP = re.compile(
    rb"^\d+ mmap\((?:NULL|0x[0-9a-f]+),(\d+),([A-Z_|]+),[A-Z_|]+,(\d+),(0x[0-9a-f]+|\d+)\)"
    rb" = 0x([0-9a-f]+)$"
)


@dataclass(frozen=True, order=True)
class CodeMapping:
    """Where the guest mapped code of a file, as its ``mmap`` system call says."""

    start: int
    end: int
    name: str  # file name of the mapped file
    offset: int  # file offset mapped at ``start``


class GuestFiles:
    """What the guest's system calls tell: the files it opened (by descriptor), where it mapped
    their code, and so at which pc each marker function is entered.

    ``entering`` caches, per distinct ``Trace`` line, the marker it enters (None: none): a dict
    lookup, not a scan of ``entries``, per line (the scan was 60 % of the loop's time per
    ``Trace`` line); it is cleared when a mapping makes a new entry known.
    """

    def __init__(self, markers: Mapping[str, Mapping[str, int]]) -> None:
        self.markers = markers
        self.fds: dict[int, str] = {}
        self.mappings: dict[int, CodeMapping] = {}
        self.entries: dict[bytes, str] = {}  # "/<pc>/" of a marker's entry as Trace lines spell it
        self.entering: dict[bytes, str | None] = {}

    def entered(self, line: bytes) -> str | None:
        """The marker function a ``Trace`` line enters, if any."""
        return next((name for at, name in self.entries.items() if at in line), None)

    def see(self, line: bytes, *, calling: bool) -> bool:
        """Take in a system call's line (without its newline); True when it is an ``openat``
        while ``calling`` (a call was entered): the inference loop is over."""
        if match := _OPENAT.match(line):
            if calling:
                return True
            self.fds[int(match[2])] = match[1].decode(errors="replace").rsplit("/", 1)[-1]
        elif match := _CLOSE.match(line):
            self.fds.pop(int(match[1]), None)
        elif (match := _MMAP.match(line)) and b"PROT_EXEC" in match[2]:
            fd = int(match[3])
            if fd in self.fds:
                self._mapped(int(match[5], 16), int(match[1]), self.fds[fd], int(match[4], 0))
        return False

    def _mapped(self, start: int, size: int, name: str, offset: int) -> None:
        """A file's code mapped at ``start``: the entries of the markers it holds are known."""
        mapping = CodeMapping(start, start + size, name, offset)
        self.mappings[start] = mapping
        for function, offsets in self.markers.items():
            at = offsets.get(name)
            if at is not None and offset <= at < offset + size:
                self.entries[b"/%016x/" % (start + at - offset)] = function
                self.entering.clear()  # lines seen before may enter it now


def code_layout(log_path: Path) -> frozenset[CodeMapping]:
    """Where a run logged with ``-d strace`` mapped the code of each file it opened."""
    files = GuestFiles({})
    try:
        with log_path.open("rb") as handle:
            for line in handle:
                files.see(line.rstrip(b"\n"), calling=False)
    except OSError as err:
        raise TraceError(log_path, f"cannot read the qemu log ({err.strerror})") from err
    return frozenset(files.mappings.values())
