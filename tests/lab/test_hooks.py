"""The lab's hooks on the controller, on their object: a named remote worker that goes down is
replaced by a local one, whether it went down running cases or before it collected any (a lab
machine whose pytest cannot start); a whole session over real socket gateways is
tests/e2e/test_lab.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_sme2.lab.hooks import Lab

pytest_plugins = ["pytester"]

FLEET = (
    "--tx",
    "popen",
    "--tx",
    "socket=lab:8888//id=mini1",
    "--sme2-device=mac:worker=mini1,host",
)


def node(worker: str, *, popen: bool) -> SimpleNamespace:
    """What the hook reads of xdist's worker controller: its gateway's id and execnet spec."""
    spec = SimpleNamespace(popen=popen, socket=None if popen else "lab:8888", ssh=None)
    return SimpleNamespace(gateway=SimpleNamespace(id=worker, spec=spec))


@pytest.mark.parametrize("error", ["Not properly terminated", None])
def test_a_named_remote_worker_that_goes_down_is_replaced_by_a_local_one(
    pytester: pytest.Pytester, error: str | None
) -> None:
    """xdist clones a crashed worker's spec: a clone of a socket gateway whose server still
    holds the dead one waited for ever (a lab machine whose pytest could not start), so the spec
    becomes ``popen``; the reason is kept for its cases' lines."""
    lab = Lab(pytester.parseconfig(*FLEET))
    mini1 = node("mini1", popen=False)
    lab.pytest_testnodedown(mini1, error)
    assert mini1.gateway.spec.popen and mini1.gateway.spec.socket is None
    assert lab._why("mini1") == (error or "its connection closed")


def test_a_local_worker_that_goes_down_is_xdists_to_replace(pytester: pytest.Pytester) -> None:
    """A worker no device names, or a local one, is left as it was."""
    lab = Lab(pytester.parseconfig(*FLEET))
    other = node("elsewhere", popen=False)
    lab.pytest_testnodedown(other, "gone")
    assert not other.gateway.spec.popen and other.gateway.spec.socket == "lab:8888"
