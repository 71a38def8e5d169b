"""Progress of long work: plain timestamped lines for logs, one live line for a terminal, and
what each task cost. A real session's progress (a cold export, under xdist) is tested end to end
in test_report_e2e.py."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable

import pytest

from pytest_sme2 import progress
from pytest_sme2.progress import Finished
from pytest_sme2.report.terminal import slowest_lines

#: the tasks each test runs are its own (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("own_progress")

STAMP = r"\d\d:\d\d:\d\d"


@pytest.fixture
def sink() -> io.StringIO:
    return io.StringIO()


def wait_for(written: Callable[[], bool], limit_s: float = 30.0) -> float:
    """Wait until the ticker thread has written what ``written`` looks for (not a fixed sleep:
    a busy machine wakes the ticker late), failing after ``limit_s``; the seconds waited."""
    started = time.monotonic()
    while not written():
        assert time.monotonic() - started < limit_s, "the ticker wrote nothing in time"
        time.sleep(0.01)
    return time.monotonic() - started


def test_plain_lines_say_the_stage_every_heartbeat_and_the_cost_at_the_end(
    sink: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.2)
    progress.configure(sink, prefix="[gw1] ")
    started = time.monotonic()
    with progress.task("export tiny[int8]") as running:
        running.stage("quantize")
        in_quantize = wait_for(lambda: "tiny[int8]: quantize" in sink.getvalue())
        running.stage("lower")
        in_lower = wait_for(lambda: sink.getvalue().count("tiny[int8]: lower") == 2)
    elapsed = time.monotonic() - started
    lines = sink.getvalue().splitlines()
    assert re.fullmatch(rf"\[gw1\] pytest-sme2 {STAMP} export tiny\[int8\] started", lines[0])
    beats = lines[1:-1]
    # a line per heartbeat at most: never more often than HEARTBEAT_S, each naming its stage
    assert 3 <= len(beats) <= elapsed / progress.HEARTBEAT_S + 1, lines
    assert all(
        re.search(r"export tiny\[int8\]: (quantize|lower) \d+ s \(\d+ s\)$", b) for b in beats
    )
    assert "lower" in beats[-1]
    end = re.fullmatch(
        rf"\[gw1\] pytest-sme2 {STAMP} export tiny\[int8\] (\S+) s: quantize (\S+), lower (\S+)",
        lines[-1],
    )
    assert end, lines[-1]
    total, quantize, lower = map(float, end.groups())
    # the line gives tenths of a second: each stage lasted at least as long as the test waited in it
    assert quantize >= round(in_quantize, 1) and lower >= round(in_lower, 1)
    assert total >= quantize + lower - 0.1
    (done,) = progress.take_finished()
    assert done.what == "export tiny[int8]" and not done.failed
    assert [name for name, _ in done.stages] == ["quantize", "lower"]
    assert progress.take_finished() == []


def test_a_live_line_is_rewritten_in_place_and_ends_with_a_newline(sink: io.StringIO) -> None:
    progress.configure(sink, live=True)
    with progress.task("build host runner") as running:
        running.stage("build")
        wait_for(lambda: "build host runner: build" in sink.getvalue())
    text = sink.getvalue()
    assert text.startswith("\npytest-sme2 ")  # the terminal's line held pytest's own text
    rewrites = text.split("\r\x1b[K")
    assert len(rewrites) >= 3  # the start, at least one tick, the end
    assert "build host runner: build" in rewrites[1]
    assert text.endswith("\n") and text.count("\n") == 2
    assert re.search(r"build host runner \S+ s: build \S+\n$", text)
    assert [done.what for done in progress.take_finished()] == ["build host runner"]


def test_a_failed_task_is_said_and_remembered(sink: io.StringIO) -> None:
    progress.configure(sink)
    with pytest.raises(RuntimeError), progress.task("export broken[fp32]") as running:
        running.stage("lower")
        raise RuntimeError("boom")
    (done,) = progress.take_finished()
    assert done.failed
    assert "export broken[fp32] " in sink.getvalue().splitlines()[-1]
    assert "(failed): lower" in sink.getvalue().splitlines()[-1]


def test_unconfigured_progress_writes_nothing_and_still_remembers() -> None:
    progress.configure(None)
    with progress.task("export quiet[fp32]") as running:
        running.stage("lower")
    (done,) = progress.take_finished()
    assert done.what == "export quiet[fp32]"


def test_finished_travels_as_json_and_the_summary_lists_the_slowest_first() -> None:
    done = [
        Finished("export a[fp32]", 2.0, (("lower", 1.5),)),
        Finished("export b[int8]", 30.0, (("quantize", 9.0), ("lower", 20.0))),
        Finished("build host runner", 60.0, (("configure", 5.0), ("build", 55.0)), failed=True),
    ]
    assert [Finished.from_json(d.to_json()) for d in done] == done
    assert slowest_lines(done, limit=2) == [
        "build host runner 60.0 s (failed): configure 5.0, build 55.0",
        "export b[int8] 30.0 s: quantize 9.0, lower 20.0",
        "3 in all, 92.0 s (summed over processes)",
    ]


def test_a_quiet_task_says_nothing_unless_it_runs_long(
    sink: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.2)
    progress.configure(sink)
    with progress.task("measure quick[fp32] on host", remember=False, quiet_s=0.6) as running:
        running.stage("sme2-off timing")
    assert sink.getvalue() == ""
    with progress.task("measure slow[fp32] on qemu-sme2", remember=False, quiet_s=0.6) as running:
        running.stage("sme2-on evidence run")
        wait_for(lambda: "evidence run" in sink.getvalue())
    lines = sink.getvalue().splitlines()
    assert lines and "started" not in sink.getvalue()
    assert all(
        re.search(r"measure slow\[fp32\] on qemu-sme2: sme2-on evidence run \d+ s \(\d+ s\)$", b)
        for b in lines[:-1]
    ), lines
    end = re.search(
        r"measure slow\[fp32\] on qemu-sme2 \S+ s: sme2-on evidence run (\S+)$", lines[-1]
    )
    assert end and float(end[1]) >= 0.6, lines[-1]  # said only once it ran quiet_s
    assert progress.take_finished() == []  # a measurement is no export's cost
