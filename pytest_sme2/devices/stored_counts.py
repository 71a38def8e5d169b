"""Counted runs kept by what they count: an unchanged qemu-sme2 variant is counted once.

Why: the count is the emulated suite's whole cost (qemu's execution log makes a run 7–17× a
plain emulated one, and nothing cheaper can count without a qemu built with plugins; see
docs/costs.md), yet it is a pure function of bytes. Runs are isolated (fixed names and environment,
a fixed CPU view: :mod:`pytest_sme2.runner.invoke`, :mod:`pytest_sme2.devices.guest_root`), and
the same program, inputs, runner, wheel, guest libraries and emulator count the same to the
instruction in any directory, session, and on hosts of any CPU count (tests/
test_qemu_attribution.py). So a counted run — its instruction counts, ETDump, outputs, timings
and log — is stored under a key of everything it is a function of, and a later run with the same
key is read back instead of emulated again, as an export is.

A verdict is only as good as the key: anything that can move a count must change it. The key
holds the bytes of every file the run reads (the qemu binary, the SME-hiding shim, the whole
guest root, the runner, the wheel's libraries, the program, its inputs; the host's
``/etc/ld.so.cache``, the one host file the guest's loader reads outside the root), qemu's
arguments with those paths replaced by their names, its reported version (a user's wrapper
script is keyed by its own bytes), the run's plan, the source of the code that runs it (isolated:
fixed names, an empty environment) and of the code that counts it, the host
kernel's release and CPU count (qemu's ``/proc/cpuinfo`` has one entry per host CPU), and this
store's format. Counts with more than one thread include the thread pool's spinning and vary
from run to run: they are never stored. ``--sme2-recount`` counts again and replaces the entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_sme2.analysis.attribution import ClockRead
from pytest_sme2.cache import cache_root, content_key
from pytest_sme2.devices.qemu_log import InstructionCount
from pytest_sme2.errors import RunnerError
from pytest_sme2.runner.invoke import (
    ETDUMP_NAME,
    LOG_NAME,
    OUTPUTS_NAME,
    TIMINGS_NAME,
    Executions,
    RunResult,
    collect_result,
)

#: the store's layout and JSON; a change of either is a new format, so older entries miss
STORE_FORMAT = 1
_COUNT_FILE = "count.json"
#: what a counted run leaves in its directory, kept with its counts
_RUN_FILES = (TIMINGS_NAME, ETDUMP_NAME, OUTPUTS_NAME, LOG_NAME)
#: host files the guest reads outside its root (its loader's cache)
HOST_FILES = (Path("/etc/ld.so.cache"),)


@dataclass(frozen=True)
class Counted:
    """A counted run: the run, one count per execution in order, the method init's count (None
    unless it ran once), and when it was counted (UTC) where it was read back from a store (its
    files copied into the caller's directory; "" when counted now)."""

    run: RunResult
    executions: tuple[InstructionCount, ...]
    init: InstructionCount | None
    counted_at: str = ""


def count_key(files: Mapping[str, Path], settings: Mapping[str, str]) -> str:
    """The key of a counted run: the content of every named file or directory (directories
    walked, links followed) and every setting, with the host's kernel release and CPU count.
    A missing file keys as missing, so creating it later changes the key."""
    parts = [f"format={STORE_FORMAT}", f"kernel={platform.release()}", f"cpus={os.cpu_count()}"]
    parts += [f"{name}={value}" for name, value in sorted(settings.items())]
    parts += [f"{name}:{content_digest(path)}" for name, path in sorted(files.items())]
    return content_key(*parts)


def portable_arguments(arguments: list[str], files: Mapping[str, Path]) -> str:
    """``arguments`` as one string with each named file's path replaced by ``<name>``: what the
    key holds of a command, whose paths differ between machines while the files' bytes (keyed
    apart) do not."""
    text = "\0".join(arguments)
    for name, path in sorted(files.items(), key=lambda item: -len(str(item[1]))):
        text = text.replace(str(path), f"<{name}>")
    return text


def content_digest(path: Path) -> str:
    """sha256 of a file's bytes, or of a directory's files (relative paths and bytes, sorted,
    links followed); "missing" when there is nothing there."""
    if path.is_file():
        return _file_digest(path)
    if not path.is_dir():
        return "missing"
    digest = hashlib.sha256()
    for directory, subdirectories, names in os.walk(path, followlinks=True):
        subdirectories.sort()
        prefix = os.path.relpath(directory, path)
        for name in sorted(names):
            file = os.path.join(directory, name)
            relative = name if prefix == "." else f"{prefix}/{name}"
            kind = _file_digest(Path(file)) if os.path.isfile(file) else "-"
            digest.update(f"{relative}\0{kind}\0".encode())
    return digest.hexdigest()


_DIGESTS: dict[tuple[int, int, int, int], str] = {}


def _file_digest(path: Path) -> str:
    """A file's sha256, remembered for the process while the same file (device and inode) keeps
    its size and mtime: the guest root alone is ~2,300 files (0.6 s to hash), asked once per
    variant. Why not its resolved path: resolving walks every link of the path (the main job
    spent 2.1 s of its 31 s warm in ``Path.resolve`` here), while device and inode name the
    file whatever path reached it."""
    status = path.stat()
    signature = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
    if signature not in _DIGESTS:
        with path.open("rb") as handle:
            _DIGESTS[signature] = hashlib.file_digest(handle, "sha256").hexdigest()
    return _DIGESTS[signature]


def store_dir() -> Path:
    """Where counted runs are kept: ``<cache>/qemu-sme2/counts`` (``SME2_CACHE_DIR`` moves it)."""
    return cache_root() / "qemu-sme2" / "counts"


def load_count(store: Path, key: str, workdir: Path, executions: Executions) -> Counted | None:
    """The run stored under ``key`` in ``store`` with its files copied into ``workdir``, or None
    when there is none (or it cannot be read: then it is counted again and replaced)."""
    entry = store / key
    try:
        data = json.loads((entry / _COUNT_FILE).read_text())
        if data.get("format") != STORE_FORMAT:
            return None
        workdir.mkdir(parents=True, exist_ok=True)
        for name in _RUN_FILES:
            (workdir / name).unlink(missing_ok=True)
            if (entry / name).is_file():
                shutil.copyfile(entry / name, workdir / name)
        result = collect_result(workdir, executions, data["log"], data["command"])
        return Counted(
            run=result,
            executions=tuple(_count_from_json(count) for count in data["executions"]),
            init=_count_from_json(data["init"]) if data["init"] is not None else None,
            counted_at=data["counted_at"],
        )
    except (OSError, ValueError, KeyError, TypeError, RunnerError):  # RunnerError: a file gone
        return None


def store_count(store: Path, key: str, counted: Counted, workdir: Path) -> None:
    """Keep ``counted``, whose files are in ``workdir``, under ``key`` in ``store`` (replacing
    any entry), whole or not at all: built beside it and renamed into place, with when it was
    counted (UTC)."""
    counted_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    store.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{key}.", suffix=".tmp", dir=store))
    try:
        for name in _RUN_FILES:
            if (workdir / name).is_file():
                shutil.copyfile(workdir / name, building / name)
        record = {
            "format": STORE_FORMAT,
            "counted_at": counted_at,
            "log": counted.run.log,
            "command": list(counted.run.command),
            "executions": [_count_json(count) for count in counted.executions],
            "init": _count_json(counted.init) if counted.init is not None else None,
        }
        (building / _COUNT_FILE).write_text(json.dumps(record))
        building.chmod(0o755)
        entry = store / key
        if entry.exists():  # a recount replaces it; the old one is moved aside, then removed
            old = Path(tempfile.mkdtemp(prefix=f"{key}.", suffix=".old", dir=store))
            os.replace(entry, old / key)
            shutil.rmtree(old, ignore_errors=True)
        with contextlib.suppress(OSError):  # another process stored the same count meanwhile
            os.replace(building, entry)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _count_json(count: InstructionCount) -> dict[str, Any]:
    data = asdict(count)
    data["clock_reads"] = [[read.ns, read.instructions] for read in count.clock_reads]
    return data


def _count_from_json(data: Mapping[str, Any]) -> InstructionCount:
    return InstructionCount(
        total=data["total"],
        sme=data["sme"],
        functions=data["functions"],
        sme_functions=data["sme_functions"],
        libraries=data["libraries"],
        blocks=data["blocks"],
        clock_reads=tuple(ClockRead(ns, instructions) for ns, instructions in data["clock_reads"]),
        interval_functions=tuple(data["interval_functions"]),
        function=data["function"],
    )
