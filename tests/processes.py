"""What is still running: for tests that must prove a fault left no process behind."""

from __future__ import annotations

import os
import time
from pathlib import Path


def _ancestry() -> set[int]:
    """This process and every process above it (the pytest worker, xdist's controller, …)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the (name): state, ppid
    return pids


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain ``text`` (read from /proc), except this
    process and its ancestors: the test's own pytest mentions its temporary paths, and a
    session killed mid-run leaves its children to init, so nothing narrower than "not us" finds
    what a fault left behind. A test's ``text`` must be its own (a path under its ``tmp_path``,
    a sleep length no other test uses)."""
    ours = _ancestry()
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        if int(cmdline.parent.name) in ours:
            continue
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if text in line:
            found.append(line)
    return found


def alive_after(text: str, seconds: float) -> list[str]:
    """:func:`processes_mentioning` ``text`` once ``seconds`` have passed, returned as soon as
    nothing is (a process that has ended does not come back): the time a killed group, or a
    runner whose session died, has to go, waited for only while it lives."""
    deadline = time.monotonic() + seconds
    while (alive := processes_mentioning(text)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive
