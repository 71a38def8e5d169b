"""Two calls at once (qemu-sme2's SME2-on and SME2-off variants): both run together, and a failure
or an interrupt of the first leaves no runner of the second running. Real processes throughout;
each test's ``sleep`` length is its own, so what a test finds alive is its own."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from pytest_sme2.errors import RunnerError
from pytest_sme2.measure.side_by_side import side_by_side
from pytest_sme2.runner.invoke import run_process
from pytest_sme2.runner.stoppable import Stopped
from tests.processes import alive_after, processes_mentioning


def _started(marker: str) -> None:
    """Wait until the ``sleep marker`` some thread started is running (10 s at most)."""
    deadline = time.monotonic() + 10
    while not processes_mentioning(f"sleep {marker}"):
        assert time.monotonic() < deadline, f"sleep {marker} never started"
        time.sleep(0.02)


def test_both_calls_run_at_once_and_give_their_results_in_order() -> None:
    together = threading.Barrier(2, timeout=10)  # one call after the other would break it
    threads: list[str] = []

    def call(name: str) -> str:
        together.wait()
        threads.append(threading.current_thread().name)
        return name

    assert side_by_side(lambda: call("on"), lambda: call("off")) == ("on", "off")
    assert threading.main_thread().name in threads and len(set(threads)) == 2


def test_an_error_of_the_first_stops_the_seconds_runner_and_refuses_its_next(
    tmp_path: Path,
) -> None:
    marker, never = "3600.5741", "3600.5742"
    started_second: list[str] = []

    def second() -> None:
        try:
            run_process(["sleep", marker], timeout_s=30)
        finally:
            started_second.append("first run ended")
        run_process(["sh", "-c", f"touch {tmp_path / 'ran'}; exec sleep {never}"], timeout_s=30)

    def first() -> None:
        _started(marker)
        raise RunnerError("sme2-on: the runner crashed")

    began = time.monotonic()
    with pytest.raises(RunnerError, match="sme2-on: the runner crashed"):
        side_by_side(first, second)
    assert time.monotonic() - began < 15  # not the 30 s of the second's deadline
    assert started_second == ["first run ended"]  # it had ended before the pair returned
    assert alive_after(f"sleep {marker}", 10) == [] and processes_mentioning(never) == []
    assert not (tmp_path / "ran").exists()  # the second's next call never started


def test_ctrl_c_on_the_calling_thread_leaves_no_runner_of_the_other() -> None:
    """SIGTERM and Ctrl-C reach the calling thread only, as KeyboardInterrupt
    (:mod:`pytest_sme2.interrupt`); its own runner call kills its own group
    (tests/e2e/test_faults.py), and the other thread's is stopped."""
    marker = "3600.5743"

    def first() -> None:
        _started(marker)
        raise KeyboardInterrupt

    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        side_by_side(first, lambda: run_process(["sleep", marker], timeout_s=30))
    assert time.monotonic() - began < 15  # not the 30 s of the other's deadline
    assert alive_after(f"sleep {marker}", 10) == []


def test_the_seconds_error_is_raised_once_the_first_is_done() -> None:
    finished: list[str] = []

    def first() -> str:
        time.sleep(0.2)
        finished.append("first")
        return "on"

    def second() -> str:
        raise RunnerError("sme2-off: no SME2 kernel ran")

    with pytest.raises(RunnerError, match="sme2-off: no SME2 kernel ran"):
        side_by_side(first, second)
    assert finished == ["first"]


def test_a_stopped_threads_call_says_it_was_stopped() -> None:
    """What the second call's own caller sees (it is dropped for the first's error above)."""
    marker = "3600.5745"
    seen: list[BaseException] = []

    def second() -> None:
        try:
            run_process(["sleep", marker], timeout_s=30)
        except Stopped as err:
            seen.append(err)
            raise

    def first() -> None:
        _started(marker)
        raise RunnerError("first failed")

    with pytest.raises(RunnerError, match="first failed"):
        side_by_side(first, second)
    (err,) = seen
    assert str(err) == f"stopped by another thread: sleep {marker}"
