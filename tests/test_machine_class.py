"""Time records per machine class, end to end: the host device's machine class is changed through
the device interface (``HostDevice.info``) in the inner session, never by editing baseline files.

Record on class A; judge on class B (time gates not judged, the test passes, the summary counts
it); ``--sme2-strict`` on B fails naming the class; ``--sme2-update-baselines`` on B adds B's
record and leaves A's as it was; back on A, a slowed model still fails the latency gate.
"""

from __future__ import annotations

import json

import pytest

from tests.test_plugin import CONFTEST, make_suite, run

pytest_plugins = ["pytester"]

#: Appended to the inner conftest: SME2_TEST_CPU, when set, renames the host's CPU, which makes
#: it another machine class exactly as another CPU would.
OTHER_CPU = """
import os
from dataclasses import replace
from pytest_sme2.devices.host import HostDevice

_real_info = HostDevice.info

def _info(self):
    info = _real_info(self)
    cpu = os.environ.get("SME2_TEST_CPU")
    if not cpu:
        return info
    cls = {**info.machine_class, "cpu": cpu}
    return replace(info, machine_class=cls, fingerprint={**info.fingerprint, **cls})

HostDevice.info = _info
"""

ARGS = ("--sme2-models=plug_a", "--sme2-runs=20", "--sme2-rounds=4")


def _suite(pytester: pytest.Pytester, size: int = 48) -> None:
    make_suite(pytester, size=size)
    pytester.makeconftest(CONFTEST.format(size=size) + OTHER_CPU)


def _machines(pytester: pytest.Pytester) -> dict[str, dict]:
    path = pytester.path / "baselines" / "host" / "plug_a-fp32.json"
    return json.loads(path.read_text())["machines"]


def test_time_records_are_kept_and_judged_per_machine_class(pytester, monkeypatch):
    _suite(pytester)
    run(pytester, *ARGS, "--sme2-update-baselines").assert_outcomes(passed=1)
    (class_a,) = _machines(pytester)
    record_a = _machines(pytester)[class_a]

    monkeypatch.setenv("SME2_TEST_CPU", "Other CPU 9000")
    on_b = run(pytester, *ARGS, "--html=b.html", "--self-contained-html")
    on_b.assert_outcomes(passed=1)
    page = (pytester.path / "b.html").read_text()
    assert (
        '<p class="sme2-untimed">pytest-sme2: no time record for this machine class in 1 of 1 '
        in page
    )
    on_b.stdout.fnmatch_lines(
        [
            "no time record for this machine class in 1 of 1 cases: other-cpu-9000-*c-* (*cpu: "
            "Other CPU 9000*); latency, shares and speedup were not judged against the baseline "
            "(record them with --sme2-update-baselines)"
        ]
    )
    strict = run(pytester, *ARGS, "--sme2-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(
        [
            "*gate skipped under --sme2-strict: time gates not judged for plug_a[[]fp32] on host: "
            "the baseline has no time record for this machine class (other-cpu-9000-*"
        ]
    )
    run(pytester, *ARGS, "--sme2-update-baselines").assert_outcomes(passed=1)
    machines = _machines(pytester)
    (class_b,) = set(machines) - {class_a}
    assert machines[class_b]["machine_class"]["cpu"] == "Other CPU 9000"
    assert machines[class_a] == record_a  # parsed back exactly: the same bytes, sorted keys

    monkeypatch.delenv("SME2_TEST_CPU")
    _suite(pytester, size=96)  # same graph, 4× the pixels
    slowed = run(pytester, *ARGS)
    slowed.assert_outcomes(failed=1)
    slowed.stdout.fnmatch_lines(["*E2E latency of plug_a[[]fp32] on host (sme2-off) rose *%*"])
