"""Content-addressed cache directories, safe across processes (pytest-xdist workers, parallel CI).

An entry is a directory named by a content key. It is built in a temporary sibling directory and
renamed into place only when complete, under a file lock, so a reader never sees half an entry and
two workers asking for the same key produce it once.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from pytest_sme2 import progress
from pytest_sme2.quiet import quiet_log_records


def cache_root() -> Path:
    """Where exports and runner builds live: ``$SME2_CACHE_DIR``, else ``~/.cache/pytest-sme2``."""
    env = os.environ.get("SME2_CACHE_DIR")
    root = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return (root if env else root / "pytest-sme2").expanduser()


def content_key(*parts: str | bytes) -> str:
    """A short stable hash of ``parts`` (order matters), used as a cache directory name."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:20]


def cached_dir(path: Path, build: Callable[[Path], None]) -> Path:
    """Return ``path``, creating it with ``build(tmp_dir)`` if it does not exist yet.

    ``build`` fills a fresh temporary directory; on success it is renamed to ``path`` atomically.
    On failure nothing is left behind and the exception propagates, so the next caller retries.
    """
    if path.is_dir():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(FileLock(str(path) + ".lock"), path.name):
        if path.is_dir():  # another process built it while we waited for the lock
            return path
        # Holding the lock, no one else is building this entry: a temporary directory of it is
        # what a killed process left (kill -9 runs no ``finally``), never someone's work.
        for stale in path.parent.glob(glob.escape(path.name) + ".*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent))
        try:
            build(tmp)
            tmp.chmod(0o777 & ~_umask())  # mkdtemp's 0700 would hide a shared cache
            os.replace(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def being_built(path: Path) -> bool:
    """Whether another process holds ``path``'s lock now (building the entry, or checking it):
    asked without waiting, so a caller with other work can do that first. Quietly: filelock's
    DEBUG records of the probe would reach a test's report (``quiet_log_records``)."""
    if not path.parent.is_dir():
        return False
    lock = FileLock(str(path) + ".lock")
    with quiet_log_records():
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return True
        lock.release()
    return False


@contextmanager
def _locked(lock: FileLock, name: str) -> Iterator[None]:
    """Hold ``lock``; while another process holds it (an xdist worker exporting the same case),
    say so as progress: a silent wait of a minute reads as a hang."""
    try:
        lock.acquire(timeout=0)
    except Timeout:
        with progress.task(f"wait for {name}: another process builds it", remember=False):
            lock.acquire()
    try:
        yield
    finally:
        lock.release()


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``path`` via a temporary file + rename: a crash never leaves it half-written.

    The temporary file sits beside ``path``: a rename is atomic only within one filesystem, and
    the target's directory is the one place known to be on it (a baselines directory may be a
    mount of its own). A kill -9 between write and rename leaves it there, so its name carries
    the writer's pid, and :func:`sweep_stranded` removes those whose writer is gone.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f"{path.name}.{os.getpid()}."
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would create it, not mkstemp's 0600
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: How :func:`write_atomic`'s temporary files end: ``<name>.<pid>.<random>.tmp``.
TEMP_SUFFIX = ".tmp"
_STRANDED = re.compile(r"\.(\d+)\.[^.]+" + re.escape(TEMP_SUFFIX) + "$")


def sweep_stranded(directory: Path) -> list[Path]:
    """Remove the temporary files of :func:`write_atomic` under ``directory`` whose writer no
    longer runs (killed between write and rename), and return them.

    A live writer's file is never taken (pytest-xdist workers write side by side): its pid still
    answers. Only this machine's pids can be asked, so on a directory shared between machines a
    file is taken only once an hour has passed, longer than any write takes.
    """
    stranded = []
    for candidate in directory.rglob("*" + TEMP_SUFFIX) if directory.is_dir() else ():
        match = _STRANDED.search(candidate.name)
        if match is None or not candidate.is_file():
            continue
        try:
            old = time.time() - candidate.stat().st_mtime > 3600
        except OSError:  # its writer renamed it meanwhile
            continue
        if old or not _running(int(match[1])):
            candidate.unlink(missing_ok=True)
            stranded.append(candidate)
    return stranded


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _umask() -> int:
    """The process umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
