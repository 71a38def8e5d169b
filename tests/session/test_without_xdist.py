"""A session where pytest-xdist is not installed, as the main job's set-up leaves it
(``scripts/install.sh`` installs the ``export`` extra only): the plugin marks a real device's
cases as one xdist group only when xdist is there to read the mark. pytest's own marker check is
the subject, so this is an inner session."""

from __future__ import annotations

import pytest

from tests.inner import INNER_TEST, inner_conftest

pytest_plugins = ["pytester"]


def test_without_xdist_a_real_devices_cases_carry_no_unknown_mark(
    pytester: pytest.Pytester,
) -> None:
    """The main job's first run (2026-12-07) warned "Unknown pytest.mark.xdist_group" in its
    summary; under ``--strict-markers`` the session ended in an INTERNALERROR. (Only that
    warning is an error here: beside the outer session's xdist worker, pytest-benchmark warns of
    xdist.)"""
    pytester.makeconftest(inner_conftest("solo"))
    pytester.makepyfile(test_suite=INNER_TEST)
    result = pytester.runpytest_subprocess(
        *("-p", "no:xdist", "--strict-markers", "-W", "error::pytest.PytestUnknownMarkWarning"),
        *("--collect-only", "-q", "--sme2-device=host"),
    )
    result.assert_outcomes()
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["test_suite.py::test_model[[]solo-fp32[]]"])
    assert "xdist_group" not in result.stdout.str() + result.stderr.str()
