"""What the session does around its side-by-side export processes (the processes themselves,
forked from real sessions: tests/test_export.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pytest_sme2.prefetch import _host_runner_built_meanwhile
from pytest_sme2.runner import build_runner


def test_the_host_runner_is_built_while_the_session_imports_the_lowering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a fresh machine the runner every numerics check needs is built beside the import
    before the fork, and is there, built, when the block ends: no thread left for the fork."""
    monkeypatch.setenv("SME2_CACHE_DIR", str(tmp_path))
    with _host_runner_built_meanwhile():
        assert "sme2-runner-build" in [t.name for t in threading.enumerate()]
    assert "sme2-runner-build" not in [t.name for t in threading.enumerate()]
    (entry,) = (tmp_path / "runner").glob("host-*[!k]")  # not the .lock beside it
    assert build_runner("host") == entry / "sme2_runner"
    assert (entry / "sme2_runner").is_file()
