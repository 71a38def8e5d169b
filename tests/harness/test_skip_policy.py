"""Skips are listed or fail (tests/skip_policy.py): a skip outside the list of platform skips
fails the session, one line each naming the test and its reason, on xdist too (an inner
session: whose controller sees its workers' test and collection reports); a listed skip, an
xfail and a pass do not (on the policy itself)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.skip_policy import (
    WHERE,
    PlatformSkip,
    SkipPolicy,
    listed_name,
    load_platform_skips,
)

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]

#: A test file of each kind of outcome; ``test_elsewhere`` is listed for another platform.
INNER = """
import pytest


def test_passes():
    pass


def test_listed():
    pytest.skip("the platform has no such thing")


def test_elsewhere():
    pytest.skip("only elsewhere")


@pytest.mark.skipif(True, reason="a tool is missing")
def test_unlisted():
    pass


@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False
"""

#: A module that skips whole at collection, as ``importorskip`` does when an install broke.
GONE = 'import pytest\n\npytest.importorskip("no_such_module_5748")\n'

CONFTEST = """
from pathlib import Path

from tests.skip_policy import register


def pytest_configure(config):
    register(config, Path(__file__).with_name("skips.toml"))
"""


def _listed(elsewhere: str) -> str:
    """The inner list: ``test_listed`` anywhere, ``test_elsewhere`` only where ``elsewhere``."""
    return (
        '[[skip]]\ntest = "test_inner.py::test_listed"\nreason = "the platform has no *"\n'
        'where = "anywhere"\nwhy = "it is the platform\'s"\n\n'
        f'[[skip]]\ntest = "test_inner.py::test_elsewhere"\nreason = "only elsewhere"\n'
        f'where = "{elsewhere}"\nwhy = "another platform\'s"\n'
    )


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    elsewhere = next(name for name, here in WHERE.items() if not here())
    pytester.makefile(".toml", skips=_listed(elsewhere))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=INNER, test_gone=GONE)
    return pytester


def test_an_unlisted_skip_fails_the_xdist_session_naming_the_test_and_its_reason(
    project: pytest.Pytester,
) -> None:
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "-rs")
    result.assert_outcomes(passed=1, skipped=4, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    unlisted = sorted(line for line in result.outlines if line.startswith("unlisted skip: "))
    assert unlisted == [
        "unlisted skip: test_gone.py: could not import 'no_such_module_5748': "
        "No module named 'no_such_module_5748'",
        "unlisted skip: test_inner.py::test_elsewhere: only elsewhere",
        "unlisted skip: test_inner.py::test_unlisted: a tool is missing",
    ]


def _skipped(nodeid: str, reason: str, **extra: object) -> pytest.TestReport:
    """A test's report, skipped for ``reason`` (``extra``: ``wasxfail`` makes it an xfail)."""
    where = (nodeid.partition("::")[0], 1, nodeid)
    skipped = (where[0], 1, f"Skipped: {reason}")
    return pytest.TestReport(nodeid, where, {}, "skipped", skipped, "call", **extra)


def test_listed_skips_and_xfails_leave_the_exit_status_alone_and_a_worker_never_decides() -> None:
    listed = PlatformSkip("test_inner.py::test_listed", "the platform has *", "anywhere", "")
    policy = SkipPolicy([listed], Path("skips.toml"))
    controller = SimpleNamespace(config=SimpleNamespace(), exitstatus=pytest.ExitCode.OK)
    policy.pytest_runtest_logreport(
        _skipped("t/test_inner.py::test_listed", "the platform has no X")
    )
    policy.pytest_runtest_logreport(_skipped("t/test_inner.py::test_known", "bug", wasxfail="bug"))
    policy.pytest_sessionfinish(controller)  # type: ignore[arg-type]
    assert controller.exitstatus == pytest.ExitCode.OK and policy.unlisted == {}

    policy.pytest_runtest_logreport(_skipped("t/test_inner.py::test_other", "a tool is missing"))
    assert policy.unlisted == {"t/test_inner.py::test_other": "a tool is missing"}
    worker = SimpleNamespace(config=SimpleNamespace(workerinput={}), exitstatus=pytest.ExitCode.OK)
    policy.pytest_sessionfinish(worker)  # type: ignore[arg-type]
    assert worker.exitstatus == pytest.ExitCode.OK  # its controller decides
    policy.pytest_sessionfinish(controller)  # type: ignore[arg-type]
    assert controller.exitstatus == pytest.ExitCode.TESTS_FAILED
    interrupted = SimpleNamespace(config=SimpleNamespace(), exitstatus=pytest.ExitCode.INTERRUPTED)
    policy.pytest_sessionfinish(interrupted)  # type: ignore[arg-type]
    assert interrupted.exitstatus == pytest.ExitCode.INTERRUPTED  # a worse status stays


def test_the_example_suites_skips_are_the_products_and_not_judged() -> None:
    """auto's emulated device that this machine cannot prepare skips its case, saying so, in the
    user's main job (tests/e2e/test_fleet.py): not a skip of this project's tests."""
    policy = SkipPolicy([], Path("skips.toml"))
    policy.pytest_runtest_logreport(
        _skipped("tests/test_suite.py::test_model[qemu-sme2-toy_cnn-fp32]", "could not be prepared")
    )
    assert policy.unlisted == {}
    policy.pytest_runtest_logreport(_skipped("tests/x/test_suite2.py::test_y", "no tool"))
    assert policy.unlisted == {"tests/x/test_suite2.py::test_y": "no tool"}


def test_an_entry_matches_its_test_reason_and_platform_only() -> None:
    entry = PlatformSkip("test_x.py::test_y[*]", "needs *", "anywhere", "why")
    assert entry.allows(listed_name("tests/deep/test_x.py::test_y[a-1]"), "needs root")
    assert not entry.allows("test_x.py::test_y[a-1]", "broke")
    assert not entry.allows("test_x.py::test_z", "needs root")
    elsewhere = next(name for name, here in WHERE.items() if not here())
    assert not PlatformSkip("test_x.py", "*", elsewhere, "why").allows("test_x.py", "any")


@pytest.mark.parametrize(
    ("text", "wrong"),
    [
        ("[[skip]\n", r"not a list of platform skips \("),
        ('[[skip]]\ntest = "t"\nreason = "r"\nwhy = "w"\n', "must have exactly the text fields"),
        (
            '[[skip]]\ntest = "t"\nreason = "r"\nwhere = "moon"\nwhy = "w"\n',
            "skip 1: where='moon' is none of anywhere, ",
        ),
    ],
)
def test_a_bad_list_is_one_line_naming_the_file(tmp_path: Path, text: str, wrong: str) -> None:
    listed = tmp_path / "skips.toml"
    listed.write_text(text)
    with pytest.raises(pytest.UsageError) as refused:
        load_platform_skips(listed)
    message = str(refused.value)
    assert message.startswith(f"{listed}: ") and "\n" not in message
    assert re.search(wrong, message), message


def test_every_listed_skip_names_a_test_of_this_suite() -> None:
    """A stale entry (its test renamed or gone) would list nothing: each entry's file exists in
    tests/ and, where it names one, its test function too."""
    tests = Path(__file__).resolve().parents[1]
    for entry in load_platform_skips(tests / "platform_skips.toml"):
        file, _, function = entry.test.partition("::")
        (source,) = tests.rglob(file)
        name = function.split("[")[0]
        assert name == "*" or f"def {name}(" in source.read_text(), entry
