"""An export process's garbage: kept while its budget allows, collected past it (the processes
themselves, forked from real sessions: tests/test_export.py)."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest

from pytest_sme2 import prefetch


class _Cycle:
    """Garbage only the cyclic collector frees: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector_off() -> Iterator[None]:
    """As in an export process: the collector off for the process's life."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _garbage() -> weakref.ref[_Cycle]:
    return weakref.ref(_Cycle())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resident memory from /proc")
def test_garbage_is_kept_within_the_budget_and_collected_past_it(
    collector_off: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    rss = prefetch._rss_bytes()
    assert rss is not None and rss > 0
    monkeypatch.setattr(prefetch, "_FORKED_RSS", rss)
    monkeypatch.setattr(prefetch, "_BUDGET", 1 << 40)
    kept = _garbage()
    assert prefetch._collect_over_budget() is False
    assert kept() is not None

    monkeypatch.setattr(prefetch, "_FORKED_RSS", 0)  # grown by all it holds: past any budget
    monkeypatch.setattr(prefetch, "_BUDGET", 1 << 20)
    assert prefetch._collect_over_budget() is True
    assert kept() is None


def test_where_resident_memory_is_unknown_every_export_is_followed_by_a_collection(
    collector_off: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prefetch, "_rss_bytes", lambda: None)
    monkeypatch.setattr(prefetch, "_BUDGET", 1 << 40)
    freed = _garbage()
    assert prefetch._collect_over_budget() is True
    assert freed() is None


@pytest.mark.parametrize(
    ("available", "processes", "budget"),
    [
        (64 << 30, 2, prefetch.GARBAGE_BUDGET_BYTES),  # plenty: the cap
        (4 << 30, 2, 1 << 30),  # half of what is available, shared by the processes
        (4 << 30, 8, 256 << 20),
        (None, 2, 0),  # unknown: collect after every export, as the collector would
    ],
)
def test_each_process_gets_at_most_its_share_of_half_the_available_memory(
    monkeypatch: pytest.MonkeyPatch, available: int | None, processes: int, budget: int
) -> None:
    monkeypatch.setattr(prefetch, "_meminfo_bytes", lambda field: available)
    assert prefetch._garbage_budget(processes) == budget


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/meminfo")
def test_available_memory_is_read_from_the_kernel() -> None:
    available = prefetch._meminfo_bytes("MemAvailable")
    total = prefetch._meminfo_bytes("MemTotal")
    assert available is not None and total is not None and 0 < available <= total
