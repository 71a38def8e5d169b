"""ETDump bytes → Trace (runs → events). No torch, no executorch import.

(Types only so far; the reader is being written.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Event:
    """One profiling event of a run, times in nanoseconds (ETDumpGen ticks on Linux/macOS).

    ``parent`` is the index (in ``Run.events``) of the innermost enclosing event, -1 for the run's
    ``Method::execute``. ``delegated`` events come from inside a delegate (they carry a delegate
    debug id); their start offsets are synthetic (XNNPACK lays them back to back), durations real.
    """

    name: str
    start_ns: int
    end_ns: int
    parent: int
    depth: int
    delegated: bool
    delegate_debug_id: str | None
    instruction_id: int

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


@dataclass(frozen=True, slots=True)
class Run:
    """One inference: a ``Method::execute`` (events[0]) and everything inside it."""

    index: int
    e2e_ns: int
    events: tuple[Event, ...]

    @property
    def e2e_ms(self) -> float:
        return self.e2e_ns / 1e6


@dataclass(frozen=True, slots=True)
class Trace:
    """Every run in an ETDump, in execution order, plus one-time setup events (load, init)."""

    path: Path | None
    runs: tuple[Run, ...]
    setup_events: tuple[Event, ...]
