"""Inner sessions forked from a server that imported torch (tests/forked_sessions.py) run as
``python -mpytest`` would: the test's environment, directory and ``PYTHONPATH`` first on
``sys.path``, nothing of the outer suite imported, their output and exit status the result's, and
a deadline that kills them."""

from __future__ import annotations

import os
import sys
import time

import pytest

from tests.forked_sessions import ForkedSession

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
