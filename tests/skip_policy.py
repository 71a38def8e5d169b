"""Skips are listed or fail: a pytest plugin for this suite (registered by tests/conftest.py).

A skipped test proves nothing, and a CI run that only counts them stays green while a test
disappears: an import that broke, a tool the install no longer provides, a check that skipped on
any exception. So every skip must be a *platform* skip written in tests/platform_skips.toml — the
test, the reason it gives, where that skip is expected and why it is the platform's — and any
other skip fails the session: exit status 1 and one line per skip naming the test and its reason.

The example suite (tests/test_suite.py) is not held to it: it is the user's main job, not a test
of this project, and its skips are the product's — ``auto``'s emulated device that this machine
cannot prepare is skipped saying so, as a user's session would (tests/e2e/test_fleet.py checks it).

The controller decides (pytest's own session, or xdist's controller, which receives every
worker's test and collection reports); an xdist worker only reports.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Where a listed skip is expected, by name: a skip listed for one platform fails elsewhere.
WHERE: dict[str, Callable[[], bool]] = {
    "anywhere": lambda: True,
    "off Linux": lambda: not sys.platform.startswith("linux"),
    "off x86-64 Linux": lambda: (sys.platform, platform.machine()) != ("linux", "x86_64"),
    "on macOS": lambda: sys.platform == "darwin",
    "without root": lambda: os.geteuid() != 0,
}

#: The example suite's file: its skips are the product's behaviour, not this suite's.
EXAMPLE_SUITE = "test_suite.py"

#: The fields of an entry of the list, each a string.
FIELDS = ("test", "reason", "where", "why")


@dataclass(frozen=True)
class PlatformSkip:
    """One expected skip: ``test`` and ``reason`` are patterns (:func:`matches`) of the test's
    name (``file.py::test[params]``, the file without its directory; a module skipped whole is
    ``file.py``) and of its skip reason; ``where`` names an entry of :data:`WHERE`."""

    test: str
    reason: str
    where: str
    why: str

    def allows(self, test: str, reason: str) -> bool:
        """Whether this entry covers ``test`` skipped for ``reason`` on this machine."""
        return matches(self.test, test) and matches(self.reason, reason) and WHERE[self.where]()


def matches(pattern: str, text: str) -> bool:
    """Whether ``text`` is ``pattern``, each ``*`` in it standing for any text. Nothing else is
    special: a test's parameters are in brackets, which a glob would read as a character set."""
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), text, re.DOTALL) is not None


def load_platform_skips(path: Path) -> tuple[PlatformSkip, ...]:
    """The entries of the list at ``path`` (``[[skip]]`` tables of :data:`FIELDS`); a bad file
    is a usage error in one line naming it and what is wrong."""
    try:
        tables = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise pytest.UsageError(f"{path}: not a list of platform skips ({err})") from None
    entries = []
    for number, table in enumerate(tables.get("skip", []), start=1):
        fields = {name: table.get(name) for name in FIELDS}
        if set(table) != set(FIELDS) or not all(isinstance(v, str) for v in fields.values()):
            raise pytest.UsageError(
                f"{path}: skip {number} must have exactly the text fields {', '.join(FIELDS)}"
            )
        if fields["where"] not in WHERE:
            raise pytest.UsageError(
                f"{path}: skip {number}: where={fields['where']!r} is none of {', '.join(WHERE)}"
            )
        entries.append(PlatformSkip(**fields))
    return tuple(entries)


def listed_name(nodeid: str) -> str:
    """``nodeid`` with its file's directories dropped (basenames are unique in this suite): the
    name a list entry matches, the same wherever the file moves."""
    path, separator, rest = nodeid.partition("::")
    return Path(path).name + separator + rest


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """What a skipped report says, without pytest's ``Skipped: `` prefix."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


class SkipPolicy:
    """Collects every skip the session reports and fails the session on those not listed."""

    def __init__(self, listed: Iterable[PlatformSkip], source: Path) -> None:
        self.listed, self.source = tuple(listed), source
        self.unlisted: dict[str, str] = {}

    def _decides(self, config: pytest.Config) -> bool:
        """Whether this process fails the session: it saw an unlisted skip and is no xdist
        worker (whose reports the controller sees)."""
        return bool(self.unlisted) and not hasattr(config, "workerinput")

    def _seen(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if listed_name(report.nodeid).partition("::")[0] == EXAMPLE_SUITE:
            return
        reason = skip_reason(report)
        if not any(entry.allows(listed_name(report.nodeid), reason) for entry in self.listed):
            self.unlisted[report.nodeid] = reason

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):  # an xfail reports as skipped
            self._seen(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:  # a module skipped whole (importorskip, skip at module level)
            self._seen(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self._decides(session.config) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self._decides(terminalreporter.config):
            return
        terminalreporter.section(f"skips not listed in {self.source}", red=True)
        for nodeid, reason in self.unlisted.items():
            terminalreporter.line(f"unlisted skip: {nodeid}: {reason}")


def register(config: pytest.Config, path: Path) -> None:
    """Install the policy with the list at ``path`` in ``config``'s session."""
    config.pluginmanager.register(SkipPolicy(load_platform_skips(path), path), "sme2-skip-policy")
