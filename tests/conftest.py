"""Fixtures shared by the test modules that need them."""

from __future__ import annotations

import pytest

from pytest_sme2.cache import cache_root
from pytest_sme2.run.devices.qemu import QemuSme2Device
from pytest_sme2.run.devices.registry import device_class

#: The user's cache (exports, runner builds, qemu), resolved before pytester points HOME at each
#: test's own directory — where an inner session would otherwise rebuild the runner and
#: re-export its models into an empty cache (~12 s each, ~99 inner sessions).
SHARED_CACHE = cache_root()


@pytest.fixture(scope="session")
def qemu_device() -> QemuSme2Device:
    """The qemu-sme2 device as the plugin builds it under ``--sme2-recount``, provisioned
    (cached): the tests that take it are of counting, so it counts every run."""
    prepared = device_class("qemu-sme2").from_options(lambda dest: dest == "sme2_recount" or None)
    assert isinstance(prepared, QemuSme2Device)
    prepared.prepare()
    return prepared


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's ``pytester``, whose inner sessions judge time even where other work took the CPU
    and share the suite's cache (:data:`SHARED_CACHE`; a test about an empty cache sets its own).

    This suite runs on two xdist workers on two cores: a measurement here shares the machine
    with the other worker's exports by design, so the default — time not judged when the runs
    lost the CPU — would make every time-gate test a coin toss. The rule itself is tested where
    it is the subject (tests/test_disturbance.py), which takes this away. Set after pytester's
    own set-up, which clears ``PYTEST_ADDOPTS``.
    """
    # the host alone unless a test names its devices: the default (auto) adds qemu-sme2 here
    monkeypatch.setenv("PYTEST_ADDOPTS", "--sme2-judge-disturbed --sme2-device=host")
    monkeypatch.setenv("SME2_CACHE_DIR", str(SHARED_CACHE))
    return pytester
