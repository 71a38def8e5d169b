"""What the session does around its side-by-side export processes (the processes themselves,
forked from real sessions: tests/export/test_export.py)."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest

from pytest_sme2.export.prefetch import _host_runner_built_meanwhile
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


def _layers(count: int) -> object:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(count))).eval()


def _eight(seed: int, count: int = 1) -> tuple[object, ...]:
    import torch

    return (torch.randn(1, 8, generator=torch.Generator().manual_seed(seed)),)


def test_a_session_alone_hands_its_processes_the_biggest_graphs_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever order it is given (a benchmark's, a plugin's): the phase ends on small exports."""
    from pytest_sme2.export import prefetch as module
    from pytest_sme2.export.model_spec import ModelSpec

    monkeypatch.setenv("SME2_CACHE_DIR", str(tmp_path))
    small, big = (
        ModelSpec(f"ordered_{n}", _layers, _eight, "", ("fp32",), (("count", n),)) for n in (1, 6)
    )
    handed: list[str] = []
    monkeypatch.setattr(
        module, "_export_in_processes", lambda *a: handed.extend(s.name for s, _ in module._PENDING)
    )
    monkeypatch.setattr(module, "_import_lowering", lambda: None)
    monkeypatch.setattr(module, "_host_runner_built_meanwhile", contextlib.nullcontext)
    monkeypatch.setattr(module, "export_model", lambda spec, dtype: None)
    module.prefetch([(small, "fp32"), (big, "fp32")], processes=2)
    assert handed == ["ordered_6", "ordered_1"]
