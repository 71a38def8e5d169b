"""Cache primitives: atomic writes, one build per key across processes, ordinary permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pytest_sme2.cache import cached_dir, content_key, write_atomic


def test_write_atomic_replaces_whole_files_with_umask_permissions(tmp_path: Path):
    path = tmp_path / "deep" / "baseline.json"
    write_atomic(path, "first")
    write_atomic(path, "second")
    assert path.read_text() == "second"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
    assert [p.name for p in path.parent.iterdir()] == ["baseline.json"]  # no temp files left


def test_a_failed_build_leaves_nothing_and_the_next_caller_retries(tmp_path: Path):
    target = tmp_path / "entry"

    def broken(directory: Path) -> None:
        (directory / "half").write_text("x")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        cached_dir(target, broken)
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.lock"]
    cached_dir(target, lambda d: (d / "ok").write_text("y"))
    assert (target / "ok").read_text() == "y"
    assert stat.S_IMODE(target.stat().st_mode) & 0o055  # readable by others, unlike mkdtemp


def test_built_once_then_reused(tmp_path: Path):
    calls = []
    for _ in range(3):
        cached_dir(tmp_path / "e", lambda d: calls.append(d))
    assert len(calls) == 1


def test_content_key_is_order_and_boundary_sensitive():
    assert content_key("a", "b") != content_key("b", "a")
    assert content_key("ab", "c") != content_key("a", "bc")
    assert content_key("x") == content_key(b"x")
