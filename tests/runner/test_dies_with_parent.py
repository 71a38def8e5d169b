"""The guard every started process runs under: SIGKILL when the session dies, without forking
the session (kill -9 of a process in a qemu-sme2 runner call: tests/e2e/test_faults.py)."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sme2.runner import dies_with_parent
from pytest_sme2.runner.invoke import run_process

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("cc") is None,
    reason="the parent-death signal is Linux's; the guard is compiled with cc",
)


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SME2_CACHE_DIR", str(tmp_path / "cache"))


def test_a_command_is_started_through_the_compiled_guard_with_no_preexec_fn(
    tmp_path: Path,
) -> None:
    """No ``preexec_fn``, so subprocess may vfork; the guard names this process as the parent
    it checks, and the command runs with its arguments and output untouched."""
    started, preexec = dies_with_parent.guarded(["echo", "a b"])
    assert preexec is None
    assert Path(started[0]).is_file() and Path(started[0]).is_relative_to(tmp_path / "cache")
    assert started[1:] == [str(os.getpid()), "echo", "a b"]
    command = ["sh", "-c", "echo out; echo err >&2; exit 3"]
    done = run_process(command, timeout_s=30)
    assert (done.args, done.returncode, done.stdout, done.stderr) == (command, 3, "out\n", "err\n")


#: A command that prints its parent-death signal (prctl PR_GET_PDEATHSIG, option 2).
PDEATHSIG = [
    sys.executable,
    "-c",
    "import ctypes; c = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(c), 0, 0, 0); "
    "print(c.value)",
]


def test_the_guard_arms_sigkill_as_the_commands_parent_death_signal() -> None:
    assert run_process(PDEATHSIG, timeout_s=60).stdout.strip() == str(int(signal.SIGKILL))


def test_a_parent_gone_before_the_signal_was_armed_means_the_command_never_runs(
    tmp_path: Path,
) -> None:
    """Started for a parent that is not its parent (here: PID 1), the guard exits 1 and never
    runs the command: that parent could not send the signal any more."""
    started, _ = dies_with_parent.guarded(["touch", str(tmp_path / "ran")])
    done = subprocess.run([started[0], "1", *started[2:]], capture_output=True, timeout=30)
    assert done.returncode == 1
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    ("make", "code"), [("missing", errno.ENOENT), ("not executable", errno.EACCES)]
)
def test_a_command_that_cannot_start_raises_the_oserror_popen_would(
    tmp_path: Path, make: str, code: int
) -> None:
    command = tmp_path / "runner"
    if make == "not executable":
        command.write_text("#!/bin/sh\n")
    with pytest.raises(OSError) as caught:
        run_process([str(command)], timeout_s=30)
    assert caught.value.errno == code
    assert caught.value.filename == str(command)


def test_a_command_exiting_127_on_its_own_is_its_exit_status_not_a_start_failure() -> None:
    done = run_process(["sh", "-c", "echo 'no such thing' >&2; exit 127"], timeout_s=30)
    assert (done.returncode, done.stderr) == (127, "no such thing\n")


def test_the_guard_is_built_again_when_its_cache_was_removed(tmp_path: Path) -> None:
    first, _ = dies_with_parent.guarded(["true"])
    shutil.rmtree(tmp_path / "cache")
    second, _ = dies_with_parent.guarded(["true"])
    assert second[0] == first[0] and Path(second[0]).is_file()
    assert run_process(["true"], timeout_s=30).returncode == 0


def test_without_a_c_compiler_python_arms_the_signal_in_the_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Slower (subprocess must fork the session for a ``preexec_fn``), the same guarantee."""
    monkeypatch.setattr(dies_with_parent.shutil, "which", lambda name: None)
    dies_with_parent._program.cache_clear()
    try:
        started, preexec = dies_with_parent.guarded(["true"])
        assert started == ["true"] and callable(preexec)
        assert run_process(PDEATHSIG, timeout_s=60).stdout.strip() == str(int(signal.SIGKILL))
    finally:
        dies_with_parent._program.cache_clear()
