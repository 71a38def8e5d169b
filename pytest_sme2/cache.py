"""Content-addressed cache directories, safe across processes (pytest-xdist workers, parallel CI).

An entry is a directory named by a content key. It is built in a temporary sibling directory and
renamed into place only when complete, under a file lock, so a reader never sees half an entry and
two workers asking for the same key produce it once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock


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
    with FileLock(str(path) + ".lock"):
        if path.is_dir():  # another process built it while we waited for the lock
            return path
        tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent))
        try:
            build(tmp)
            tmp.chmod(0o777 & ~_umask())  # mkdtemp's 0700 would hide a shared cache
            os.replace(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``path`` via a temporary file + rename: a crash never leaves it half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would create it, not mkstemp's 0600
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
