"""Cache primitives: atomic writes, one build per key across processes, ordinary permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pytest_sme2.cache import cached_dir, content_key, sweep_stranded, write_atomic


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


def test_a_temporary_file_whose_writer_was_killed_is_swept_and_a_live_ones_kept(tmp_path: Path):
    """kill -9 between write and rename leaves ``<name>.<pid>.<random>.tmp`` beside the file: the
    next session removes it, never the file of a writer that still runs (an xdist worker)."""
    import subprocess

    dead_pid = subprocess.Popen(["true"])  # a pid that has exited
    dead_pid.wait()
    baselines = tmp_path / "baselines" / "host"
    baselines.mkdir(parents=True)
    stranded = baselines / f"toy-fp32.json.{dead_pid.pid}.q3w1gv0o.tmp"
    stranded.write_text("{}")
    live = baselines / f"toy-fp32.json.{os.getpid()}.a1b2c3d4.tmp"
    live.write_text("{}")
    kept = baselines / "notes.tmp"  # not one of write_atomic's
    kept.write_text("mine")
    assert sweep_stranded(tmp_path / "baselines") == [stranded]
    assert sorted(p.name for p in baselines.iterdir()) == sorted([live.name, kept.name])
    assert sweep_stranded(tmp_path / "absent") == []


def test_write_atomic_names_its_temporary_file_after_its_writer(tmp_path: Path, monkeypatch):
    seen: list[str] = []
    real_replace = os.replace

    def spy(source: str, target: Path) -> None:
        seen.append(Path(source).name)
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", spy)
    write_atomic(tmp_path / "b.json", "{}")
    assert seen and seen[0].startswith(f"b.json.{os.getpid()}.") and seen[0].endswith(".tmp")


def test_an_entry_s_stale_temporary_directories_are_swept_when_it_is_built(tmp_path: Path):
    """An export killed mid-build leaves ``<entry>.<random>.tmp``; whoever builds the entry next
    holds its lock, so no one else can be filling such a directory: it is removed."""
    target = tmp_path / "entry"
    stale = tmp_path / "entry.x1y2z3.tmp"
    stale.mkdir()
    (stale / "half.pte").write_text("x")
    other = tmp_path / "other.x1y2z3.tmp"  # another entry's: not this build's to judge
    other.mkdir()
    cached_dir(target, lambda directory: (directory / "done").write_text("ok"))
    assert not stale.exists() and other.is_dir() and (target / "done").is_file()


def test_waiting_for_another_builder_is_said_and_not_counted_as_a_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Another process (here: a thread holding the entry's lock) builds the entry: the waiter
    says it waits, then takes the entry that process built, and builds nothing itself."""
    import io
    import threading
    import time

    from filelock import FileLock

    from pytest_sme2 import progress

    monkeypatch.setattr(progress, "_SINK", None)
    monkeypatch.setattr(progress, "_FINISHED", [])
    sink = io.StringIO()
    progress.configure(sink)
    target = tmp_path / "entry"
    holding = threading.Event()

    def other_builder() -> None:  # builds once the waiter says it waits (or 60 s passed)
        with FileLock(str(target) + ".lock"):
            holding.set()
            deadline = time.monotonic() + 60
            while "wait for entry" not in sink.getvalue() and time.monotonic() < deadline:
                time.sleep(0.01)
            target.mkdir()
            (target / "built").write_text("by the other")

    other = threading.Thread(target=other_builder)
    other.start()
    holding.wait()
    assert cached_dir(target, lambda _: pytest.fail("built twice")) == target
    assert (target / "built").read_text() == "by the other"
    assert "wait for entry: another process builds it started" in sink.getvalue()
    assert progress.take_finished() == []
    other.join()
