"""Inner sessions forked from a server that imported torch (tests/forked_sessions.py) run as
``python -mpytest`` would: the test's environment, directory and ``PYTHONPATH`` first on
``sys.path``, nothing of the outer suite imported, their output and exit status the result's, and
a deadline that kills them; and an inner session of one process is not taken for an xdist worker
because the test that started it runs on one."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.forked_sessions import ForkedSession
from tests.inner import XDIST_WORKER_ENV, InnerProject

pytest_plugins = ["pytester"]

INNER = """
import os
import sys


def test_sees_what_a_fresh_interpreter_would():
    print("cwd", os.getcwd())
    print("first on sys.path", sys.path[:3])
    print("marker", os.environ.get("SME2_FORK_MARKER"))
    print("outer suite imported", sorted(m for m in sys.modules if m.split(".")[0] == "tests"))
    print("pid", os.getpid())


def test_fails():
    assert False, "failed as asked"
"""


def test_a_forked_session_sees_its_environment_directory_and_path(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = pytester.mkdir("extra")
    monkeypatch.setenv("SME2_FORK_MARKER", "forked-5746")
    monkeypatch.setenv("PYTHONPATH", str(extra))
    pytester.makepyfile(test_inner=INNER)
    started: list[object] = []
    original = pytester.popen

    def noting(*args: object, **kw: object) -> object:
        started.append(popen := original(*args, **kw))  # type: ignore[arg-type]
        return popen

    monkeypatch.setattr(pytester, "popen", noting)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    assert [type(p) for p in started] == [ForkedSession]
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            f"*cwd {pytester.path}",
            # python -mpytest puts its directory first; pytester puts it first in PYTHONPATH too
            f"first on sys.path ['{pytester.path}', '{pytester.path}', '{extra}']",
            "marker forked-5746",
            "outer suite imported []",
            "*failed as asked*",
        ]
    )
    pid = int(next(line.split()[-1] for line in result.outlines if line.startswith("pid ")))
    assert pid not in (os.getpid(), os.getppid())
    assert str(extra) not in sys.path  # the outer session's path is its own


def test_a_forked_session_past_its_deadline_is_killed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_slow="import time\n\ndef test_slow():\n    time.sleep(3600.5747)\n")
    began = time.monotonic()
    with pytest.raises(pytester.TimeoutExpired):
        pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=5)
    assert time.monotonic() - began < 60


#: What an inner session reports of the xdist variables it was started with.
WORKER_ENV = """
import os


def test_worker_env():
    print("xdist variables", sorted(name for name in os.environ if name.startswith("PYTEST_XDIST")))
"""


@pytest.fixture
def on_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The outer test as on an xdist worker of three, whether or not this run has any: before
    ``pytester``, whose set-up must take these away from the sessions it starts."""
    for name, value in zip(XDIST_WORKER_ENV, ("gw2", "3", "5f0c1e"), strict=True):
        monkeypatch.setenv(name, value)


def test_pytesters_inner_session_inherits_no_xdist_worker(
    on_a_worker: None, pytester: pytest.Pytester
) -> None:
    """The plugin takes a process with ``PYTEST_XDIST_WORKER`` for a worker (no counting ahead,
    one export process, ``[gw2]`` on its progress lines): an inner session that inherited it ran
    none of what one process does, on CI's two workers alone."""
    pytester.makepyfile(test_inner=WORKER_ENV)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*xdist variables []*"])


def test_an_inner_projects_session_inherits_no_xdist_worker(
    on_a_worker: None, tmp_path: Path
) -> None:
    """As pytester's (above), for the sessions of a project wider than one test."""
    result = InnerProject(tmp_path, "", test_inner=WORKER_ENV).run("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*xdist variables []*"])
