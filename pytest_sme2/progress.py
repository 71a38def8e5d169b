"""Progress of long work — exports, runner builds, slow measurements — while it runs, and what it
cost.

A cold session exports every case before its first test reports (``prefetch.prefetch``), 6–96 s
each for real architectures: 20 of them kept a terminal at ``test_zoo.py`` for 17 minutes with
nothing else said. So each long step is a :func:`task` naming what (``export toy_cnn[int8]``),
its current stage and how long both have run, written

- on a terminal: as one live line, rewritten every :data:`LIVE_TICK_S`;
- elsewhere (a CI log, a pytest-xdist worker): as plain timestamped lines — when the task
  starts, every :data:`HEARTBEAT_S` while it runs, and when it ends with its seconds per stage —
  so a log says what the session is doing every few seconds without flooding.

Where the lines go is set once by :func:`configure`: pytest's plugin hands it a duplicate of the
process's stderr taken at configure time, outside pytest's capture of a test's output (which
would swallow it: the exports run inside a fixture). An xdist worker's stderr is the
controller's (execnet only takes over stdin and stdout), so a worker's lines reach the same
terminal or log, prefixed with the worker's name: a worker cannot otherwise write there while a
test runs. Not configured — a script, a library call — nothing is written.

Finished exports are remembered (:func:`take_finished`) for the session summary of the slowest.
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TextIO

#: Seconds between plain progress lines of a running task (a CI log, an xdist worker).
HEARTBEAT_S = 5.0
#: Seconds between rewrites of the live line on a terminal.
LIVE_TICK_S = 1.0
#: ANSI: carriage return, then erase to the end of the line.
_ERASE = "\r\x1b[K"


@dataclass(frozen=True)
class Finished:
    """A task that ended: what, its seconds in all and per stage (in order), and whether it
    failed. Plain data: it travels from an xdist worker to the controller in a test report."""

    what: str
    seconds: float
    stages: tuple[tuple[str, float], ...]
    failed: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "what": self.what,
            "seconds": self.seconds,
            "stages": [list(s) for s in self.stages],
            "failed": self.failed,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Finished:
        stages = data["stages"]
        assert isinstance(stages, list)
        return cls(
            what=str(data["what"]),
            seconds=float(data["seconds"]),  # type: ignore[arg-type]
            stages=tuple((str(name), float(seconds)) for name, seconds in stages),
            failed=bool(data["failed"]),
        )

    def describe(self) -> str:
        """``export toy_cnn[int8] 23.1 s: lower 12.0, quantize 5.1, …`` (stages in order)."""
        stages = ", ".join(f"{name} {seconds:.1f}" for name, seconds in self.stages)
        failed = " (failed)" if self.failed else ""
        return f"{self.what} {self.seconds:.1f} s{failed}" + (f": {stages}" if stages else "")


@dataclass
class Task:
    """One long step under way; :meth:`stage` says which stage it is at. A task with
    ``quiet_s`` is said only once it has run that long (``announced``)."""

    what: str
    quiet_s: float = 0.0
    announced: bool = False
    started: float = field(default_factory=time.monotonic)
    current: str = ""
    stage_started: float = field(default_factory=time.monotonic)
    stages: dict[str, float] = field(default_factory=dict)

    def stage(self, name: str) -> None:
        """Enter stage ``name`` (the previous one's time is kept; a stage entered again adds)."""
        now = time.monotonic()
        with _LOCK:
            self._close_stage(now)
            self.current, self.stage_started = name, now

    def _close_stage(self, now: float) -> None:
        if self.current:
            self.stages[self.current] = self.stages.get(self.current, 0.0) + (
                now - self.stage_started
            )

    def status(self, now: float) -> str:
        """``export toy_cnn[int8]: lower 12 s (27 s)``."""
        at = f": {self.current} {now - self.stage_started:.0f} s" if self.current else ""
        return f"{self.what}{at} ({now - self.started:.0f} s)"


@dataclass
class _Sink:
    stream: TextIO
    live: bool
    prefix: str
    dirty: bool = True  # the terminal's line holds someone else's text (live mode)


_LOCK = threading.RLock()
_SINK: _Sink | None = None
_ACTIVE: list[Task] = []  # innermost last: an export's numerics may build the runner
_FINISHED: list[Finished] = []
_TICKER: threading.Thread | None = None
_WAKE = threading.Event()
_LAST_LINE = 0.0  # time.monotonic() of the last line written


def configure(stream: TextIO | None, *, live: bool = False, prefix: str = "") -> None:
    """Write progress to ``stream`` (None: nowhere) — a live line if ``live``, else plain lines,
    each starting with ``prefix`` (an xdist worker's name)."""
    global _SINK
    with _LOCK:
        _SINK = None if stream is None else _Sink(stream, live, prefix)


def terminal_written() -> None:
    """Someone else wrote on the terminal's current line: the next live line starts a new one."""
    with _LOCK:
        if _SINK is not None:
            _SINK.dirty = True


def take_finished() -> list[Finished]:
    """The tasks finished since the last call, oldest first."""
    with _LOCK:
        finished = list(_FINISHED)
        _FINISHED.clear()
    return finished


@contextmanager
def task(what: str, *, remember: bool = True, quiet_s: float = 0.0) -> Iterator[Task]:
    """Run a long step as a task named ``what``, reported while it runs and when it ends, and
    kept for the session's summary if ``remember`` (a wait for another process is not a cost of
    its own: that process reports the work).

    With ``quiet_s``, nothing is said (nor remembered) unless the task runs that long: for a
    step that is usually quick but can take many minutes (a measurement: seconds on the host,
    over 10 minutes of emulation for one real architecture on qemu-sme2; provisioning qemu-sme2:
    instant once cached, minutes of apt and downloads on a fresh machine)."""
    running = Task(what, quiet_s=quiet_s, announced=not quiet_s)
    with _LOCK:
        _ACTIVE.append(running)
        if running.announced:
            _write(f"{what} started", final=False)
        _start_ticker()
    failed = True
    try:
        yield running
        failed = False
    finally:
        now = time.monotonic()
        with _LOCK:
            running._close_stage(now)
            _ACTIVE.remove(running)
            done = Finished(
                what,
                round(now - running.started, 3),
                tuple((name, round(s, 3)) for name, s in running.stages.items()),
                failed,
            )
            if remember and running.announced:  # a quiet task that stayed quick cost nothing
                _FINISHED.append(done)
            if running.announced:
                _write(done.describe(), final=True)
        _WAKE.set()


def _write(text: str, *, final: bool) -> None:
    """One progress line (caller holds the lock). A live terminal rewrites its line until a
    final one; plain output gets a timestamped line each time."""
    global _LAST_LINE
    sink = _SINK
    if sink is None:
        return
    _LAST_LINE = time.monotonic()
    stamp = datetime.now().strftime("%H:%M:%S")
    line = f"{sink.prefix}pytest-sme2 {stamp} {text}"
    try:
        if sink.live:
            start = "\n" if sink.dirty else _ERASE
            if not final:  # a line that wraps could not be rewritten in place
                line = line[: _columns(sink.stream) - 1]
            sink.stream.write(start + line + ("\n" if final else ""))
            sink.dirty = False
        else:
            sink.stream.write(line + "\n")
        sink.stream.flush()
    except (OSError, ValueError):  # the terminal went away (a closed pipe): progress is optional
        configure(None)


def _columns(stream: TextIO) -> int:
    """The width of the terminal ``stream`` writes to (80 when it cannot be told)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, io.UnsupportedOperation):
        return 80


def _start_ticker() -> None:
    """One daemon thread per process that writes the innermost task's status while any runs."""
    global _TICKER
    if _TICKER is None:
        _TICKER = threading.Thread(target=_tick, name="pytest-sme2 progress", daemon=True)
        _TICKER.start()


def _tick() -> None:
    global _TICKER
    while True:
        with _LOCK:
            live = _SINK is not None and _SINK.live
        _WAKE.wait(LIVE_TICK_S if live else 0.5)
        _WAKE.clear()
        now = time.monotonic()
        with _LOCK:
            if not _ACTIVE:
                _TICKER = None  # under the lock: the next task starts a new ticker
                return
            for quiet in _ACTIVE:
                quiet.announced = quiet.announced or now - quiet.started >= quiet.quiet_s
            said = [t for t in _ACTIVE if t.announced]
            if said and _SINK is not None and (_SINK.live or now - _LAST_LINE >= HEARTBEAT_S):
                _write(" › ".join(t.status(now) for t in said), final=False)
