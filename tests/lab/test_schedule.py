"""The lab's scheduler on its object: which worker is sent which case, and what becomes of a
named worker's cases when it goes away or was never there. The workers are stand-ins recording
what xdist's controller would send them (``send_runtest_some``, ``shutdown``); a whole session
over a real socket gateway is tests/e2e/test_lab.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_sme2.lab.schedule import PinnedScheduling, group_of

#: a collection as the workers send it under ``loadgroup``: each case's group after ``@``
COLLECTION = [
    "t.py::test_model[host-one-fp32]@host",
    "t.py::test_model[host-two-fp32]@host",
    "t.py::test_model[qemu-sme2-one-fp32]",
    "t.py::test_model[qemu-sme2-two-fp32]",
    "t.py::test_model[mac:worker=mini1-one-fp32]@mac:worker=mini1",
    "t.py::test_model[mac:worker=mini1-two-fp32]@mac:worker=mini1",
    "t.py::test_model[mac:worker=mini1-three-fp32]@mac:worker=mini1",
]
PINNED = {"mac:worker=mini1": "mini1"}


@dataclass(eq=False)
class Worker:
    """What the scheduler asks of xdist's worker controller."""

    id: str
    popen: bool = True
    sent: list[int] = field(default_factory=list)
    shutting_down: bool = False

    def __post_init__(self) -> None:
        spec = SimpleNamespace(popen=self.popen, socket=None if self.popen else "lab:8888")
        self.gateway = SimpleNamespace(id=self.id, spec=spec)

    def send_runtest_some(self, indices: list[int]) -> None:
        assert not self.shutting_down
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


@pytest.fixture
def reports() -> list[Any]:
    return []


def hooks(reports: list[Any]) -> Any:
    """The session's hooks the scheduler calls: each report kept."""

    def keep(report: Any) -> None:
        reports.append(report)

    return SimpleNamespace(pytest_runtest_logreport=keep, pytest_collectreport=keep)


def scheduling(reports: list[Any], *workers: Worker) -> Any:
    """The scheduler with ``workers`` up and their collections in, scheduled."""
    why = {"mini1": "Not properly terminated"}.get
    sched = PinnedScheduling(hooks(reports), len(workers), print, PINNED, lambda w: why(w, "?"))
    for worker in workers:
        sched.add_node(worker)
        sched.add_node_collection(worker, COLLECTION)
    sched.schedule()
    return sched


def test_the_group_a_worker_appended_is_read_back() -> None:
    assert group_of(COLLECTION[0]) == "host"
    assert group_of(COLLECTION[4]) == "mac:worker=mini1"
    assert group_of(COLLECTION[2]) is None
    assert group_of("t.py::test[a@b]") is None  # an "@" inside the parameters is no group


def test_a_named_worker_takes_its_devices_cases_at_once_and_no_other(reports: list[Any]) -> None:
    local, mac = Worker("gw0"), Worker("mini1", popen=False)
    sched = scheduling(reports, local, mac)
    assert mac.sent == [4, 5, 6] and mac.shutting_down
    # the local worker: the host's group whole, then the emulated cases one at a time
    assert local.sent[:2] == [0, 1]
    done = 0
    while done < len(local.sent):  # each case run, as the worker reports it
        sched.mark_test_complete(local, local.sent[done])
        done += 1
    assert local.sent == [0, 1, 2, 3] and local.shutting_down
    for index in (4, 5, 6):
        sched.mark_test_complete(mac, index)
    assert sched.tests_finished and not reports


def test_a_named_worker_gone_fails_its_cases_not_started_each_in_one_line(
    reports: list[Any],
) -> None:
    """The case it ran is xdist's to fail (returned); the two it had not started fail here, each
    with the device and the worker in one line and an unmeasured outcome; the rest go on."""
    local, mac = Worker("gw0"), Worker("mini1", popen=False)
    sched = scheduling(reports, local, mac)
    sched.mark_test_complete(mac, 4)
    assert sched.remove_node(mac) == COLLECTION[5]
    assert [r.nodeid for r in reports] == [COLLECTION[6]]
    (report,) = reports
    line = (
        "mac:worker=mini1: the xdist worker 'mini1' that runs its cases went away "
        "(Not properly terminated)"
    )
    assert report.failed and report.longrepr == line
    assert report.sme2_outcome["unmeasured"] == ["failed", line]
    assert sched.crash_line(COLLECTION[5], "mini1") == line + " while running it"
    assert sched.has_pending  # the local worker's cases are still to run


def test_a_named_worker_that_never_came_up_fails_its_cases(reports: list[Any]) -> None:
    """Left out as unreachable: its cases fail at once, the local worker runs the rest."""
    local = Worker("gw0")
    scheduling(reports, local)
    assert [r.nodeid for r in reports] == COLLECTION[4:]
    said = "'mini1' that runs its cases was not there (Not properly terminated)"
    assert all(said in r.longrepr for r in reports)
    assert local.sent[:2] == [0, 1]


def test_a_local_worker_gone_hands_its_cases_to_the_worker_replacing_it(
    reports: list[Any],
) -> None:
    """The other local worker had taken the rest and was told to stop: xdist's replacement takes
    the case the lost one had not started, as it comes up."""
    one, other, mac = Worker("gw0"), Worker("gw1"), Worker("mini1", popen=False)
    sched = scheduling(reports, one, other, mac)
    assert (one.sent, other.sent) == ([0, 1], [2, 3])
    assert sched.remove_node(one) == COLLECTION[0]
    clone = Worker("gw3")
    sched.add_node(clone)
    sched.add_node_collection(clone, COLLECTION)
    sched.schedule()
    assert clone.sent == [1] and clone.shutting_down and not reports


def test_workers_that_collected_other_tests_run_nothing(reports: list[Any]) -> None:
    local, mac = Worker("gw0"), Worker("mini1", popen=False)
    sched = PinnedScheduling(hooks(reports), 2, print, PINNED, str)
    sched.add_node(local)
    sched.add_node(mac)
    sched.add_node_collection(local, COLLECTION)
    sched.add_node_collection(mac, [*COLLECTION, "t.py::test_model[host-four-fp32]@host"])
    sched.schedule()
    (error,) = reports
    assert error.nodeid == "mini1" and "Different tests were collected" in str(error.longrepr)
    assert not local.sent and not mac.sent and local.shutting_down and mac.shutting_down
    assert sched.tests_finished
