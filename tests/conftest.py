"""Fixtures shared by the test modules that need them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_sme2.cache import cache_root
from pytest_sme2.devices.kinds import device_class
from pytest_sme2.devices.qemu import QemuSme2Device
from tests.forked_sessions import forked_popen
from tests.skip_policy import register as register_skip_policy

#: The user's cache (exports, runner builds, qemu), resolved before pytester points HOME at each
#: test's own directory — where an inner session would otherwise rebuild the runner and
#: re-export its models into an empty cache (~12 s each, ~99 inner sessions).
SHARED_CACHE = cache_root()

#: The skips this suite expects, each a platform's (tests/skip_policy.py fails on any other).
PLATFORM_SKIPS = Path(__file__).with_name("platform_skips.toml")


def pytest_configure(config: pytest.Config) -> None:
    """Skips are listed or fail the session (:mod:`tests.skip_policy`)."""
    register_skip_policy(config, PLATFORM_SKIPS)


@pytest.fixture(scope="session")
def qemu_device() -> QemuSme2Device:
    """The qemu-sme2 device as the plugin builds it under ``--sme2-recount``, provisioned
    (cached): the tests that take it are of counting, so it counts every run."""
    prepared = device_class("qemu-sme2").from_options(lambda dest: dest == "sme2_recount" or None)
    assert isinstance(prepared, QemuSme2Device)
    prepared.prepare()
    return prepared


#: Plugins no inner session uses. Third-party ones this environment installs: loading them cost
#: each of the ~120 inner sessions ~2.5 s (hypothesis's 2.0 s, hydra's 0.5 s; measured with
#: ``python -X importtime -m pytest --co`` in an empty directory: 7.3 s with them, 2.3 s without,
#: on the loaded 2-core VM), anyio's, kgb's and platformdirs' 0.35 s more. And pytest's own hooks
#: for unraisable and thread exceptions, whose clean-up at exit runs the garbage collector over
#: torch's objects: 0.56 s. An inner session of the small model collected in 3.0 s with only the
#: first two spared, 2.0 s with all (quiet EPYC 26/2). Blocking a plugin that is not installed is
#: no error.
SPARED_PLUGINS = (
    "-p no:hypothesispytest",
    "-p no:hydra_pytest",
    "-p no:anyio",
    "-p no:kgb",
    "-p no:platformdirs",
    "-p no:unraisableexception",
    "-p no:threadexception",
)


@pytest.fixture(scope="session", autouse=True)
def inner_sessions_spare_plugins() -> Iterator[None]:
    """Every pytest a test starts as a subprocess (not only pytester's) skips
    :data:`SPARED_PLUGINS`: set in this worker's environment once its own session is running,
    in place of the outer session's own ``PYTEST_ADDOPTS`` (``--durations`` for a CI log is no
    option of the sessions its tests start, as pytester's are not)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTEST_ADDOPTS", " ".join(SPARED_PLUGINS))
        yield


#: The short plan of :data:`INNER_DEFAULTS`.
INNER_PLAN = ("--sme2-runs=6", "--sme2-rounds=2", "--sme2-traced-runs=2")

#: What every inner session runs with unless its test says otherwise (a later flag wins):
#: time judged beside the other worker (see :func:`pytester`); the host alone, where the default
#: (auto) adds qemu-sme2 on this CPU; and category shares opened wide — the inner models run in
#: 0.07 ms, where a baseline recorded beside the other worker held Other at 43 % and every later
#: measurement, four of them spread over 10 s, at 9 %. The share gate is tested where it is the
#: subject (tests/test_gates.py), and on real-sized models by benchmarks/gating_quality.py.
#: And a short measurement plan (the session's default is 10 rounds of 20 runs and 10 traced
#: runs): each round is a runner call, over a second through the adb double, so two phones'
#: three cases took 5 minutes; a test that judges time against its own planted change passes
#: the plan it needs (a later flag wins).
INNER_DEFAULTS = (
    *SPARED_PLUGINS,
    "--sme2-judge-disturbed",
    "--sme2-device=host",
    "--sme2-share-tolerance=100",
    *INNER_PLAN,
)


@pytest.fixture
def pytester(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> pytest.Pytester:
    """pytest's ``pytester``, whose inner sessions judge time even where other work took the CPU
    and share the suite's cache (:data:`SHARED_CACHE`; a test about an empty cache sets its own).

    This suite runs on two xdist workers on two cores: a measurement here shares the machine
    with the other worker's exports by design, so the default — time not judged when the runs
    lost the CPU — would make every time-gate test a coin toss. The rule itself is tested where
    it is the subject (tests/test_disturbance.py), which takes this away. Set after pytester's
    own set-up, which clears ``PYTEST_ADDOPTS``. Its ``runpytest_subprocess`` sessions are
    forked from a server that has imported torch (:mod:`tests.forked_sessions`), except for a
    test marked ``fresh_interpreter`` (one about what importing the libraries does).
    """
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(INNER_DEFAULTS))
    monkeypatch.setenv("SME2_CACHE_DIR", str(SHARED_CACHE))
    if request.node.get_closest_marker("fresh_interpreter") is None:
        monkeypatch.setattr(pytester, "popen", forked_popen(pytester.popen))
    return pytester
