"""What is still running: for tests that must prove a fault left no process behind."""

from __future__ import annotations

from pathlib import Path


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain ``text`` (read from /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if text in line:
            found.append(line)
    return found
