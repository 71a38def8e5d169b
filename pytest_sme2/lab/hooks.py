"""The lab's hooks (:class:`Lab`, registered by the plugin at configure time), on the controller
and on a remote xdist worker, and what the session asks of them (:func:`received`).

On the controller: a fleet that names workers (``mac:worker=mini1``) must name workers of
``--tx`` (a usage error otherwise, before any gateway is opened); xdist schedules with
:class:`~pytest_sme2.lab.schedule.PinnedScheduling`; each remote worker is told where the
controller keeps its files; a lost worker's case says which device and worker in one line; each
shipped test is unpacked and its outcome moved there (:mod:`~pytest_sme2.lab.shipping`).

On a remote worker (one reached through ``--tx socket=…``/``ssh=…``, not ``popen``): its run
directories and history go to a directory of its own (the controller's paths name the
controller's disk), removed when its session ends, as each measured test's report carries them
back.
"""

from __future__ import annotations

import shutil
import tempfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sme2.case_files import REMOTE_KEY
from pytest_sme2.records.outcome import CaseOutcome

if TYPE_CHECKING:
    from collections.abc import Generator

    from pytest_sme2.devices.spec import DeviceSpec
    from pytest_sme2.judge.history import HistoryLog
    from pytest_sme2.lab.shipping import Shipment

#: the report's attribute holding a remote worker's shipment (``Shipment.to_json``)
SHIPMENT_ATTR = "sme2_files"


def _lab_fleet(config: pytest.Config) -> tuple[DeviceSpec, ...]:
    """The fleet, where some device of it is named for a worker; else () (the common case, said
    without parsing the fleet: a session may run no sme2 test)."""
    from pytest_sme2.devices.kinds import DeviceKinds
    from pytest_sme2.errors import ConfigError
    from pytest_sme2.settings import FLEET_INI, fleet_specs

    given = (config.getoption("sme2_device", None), config.getini(FLEET_INI))
    if not any("worker=" in str(text or "") for text in (*given, config.getini("sme2_device"))):
        return ()
    try:
        return fleet_specs(config.getoption, config.getini, DeviceKinds.from_hook(config.hook))
    except ConfigError:
        return ()  # said once, when the tests are collected


def pinned_groups(config: pytest.Config) -> dict[str, str]:
    """Each device named for a worker: its xdist group (its spec) → the worker's id."""
    from pytest_sme2.measure.fleet import xdist_group

    fleet = _lab_fleet(config)
    return {xdist_group(spec) or spec.id: spec.worker for spec in fleet if spec.worker}


def local_replacement(spec: Any) -> None:
    """Make the execnet spec of a lost remote worker a local one (``popen``), for the clone xdist
    starts in its place (``lab.schedule``'s docstring says why)."""
    for key in ("socket", "ssh", "chdir", "python", "via"):
        setattr(spec, key, None)
    spec.popen = True


def check_workers(config: pytest.Config) -> None:
    """Every worker the fleet names is one of ``--tx``'s (``//id=ID``): a usage error naming the
    device and how to give the worker otherwise (its cases would run on a machine of another
    kind, or on none). Not one, in a session without xdist's workers."""
    fleet = _lab_fleet(config)
    if not any(spec.worker for spec in fleet):
        return
    from execnet import XSpec

    tx = getattr(config.option, "tx", None) or ()  # none without xdist: the cases would run here
    given = [XSpec(spec.partition("*")[2] or spec).id for spec in tx]
    for spec in fleet:
        if spec.worker is not None and spec.worker not in given:
            raise pytest.UsageError(
                f"--sme2-device: {spec.id} names the xdist worker {spec.worker!r}, which no --tx "
                f"gives: add --tx socket=HOST:PORT//id={spec.worker}//chdir=CHECKOUT (or ssh=…)"
            )
    named = {spec.worker for spec in fleet if spec.worker}
    anywhere = [spec.id for spec in fleet if spec.worker is None]
    if anywhere and all(id in named for id in given):
        raise pytest.UsageError(
            f"--sme2-device: {', '.join(anywhere)} run on the workers no device names, and every "
            "--tx is named for one: add --tx popen"
        )


def _option_path(config: pytest.Config, dest: str) -> Path | None:
    value = config.getoption(dest, None) or config.getini(dest)
    return Path(value).resolve() if value else None


class Lab:
    """The lab's state and hooks in one process: the controller's or a remote worker's."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        #: why each worker went away, in one line (controller)
        self._errors: dict[str, str] = {}
        #: the remote workers left out as the session started: they could not be reached
        self.unreachable: dict[str, str] = {}
        #: each remote worker's history file here (controller)
        self._logs: dict[str, HistoryLog] = {}
        #: this remote worker's own directory, None elsewhere
        self._own: Path | None = None
        #: how much of each of its history files was shipped (remote worker)
        self._shipped: dict[Path, int] = {}

    def controller_root(self, worker: str) -> Path:
        """Where the controller keeps ``worker``'s run directories: ``--sme2-artifacts``'s
        folders, as a local worker's, else a folder of its own in pytest's basetemp."""
        given = _option_path(self.config, "sme2_artifacts")
        if given is not None:
            return given
        basetemp = self.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        return basetemp / f"remote-{worker}" / "sme2-artifacts"

    def own_directories(self, remote: dict[str, Any]) -> None:
        """On a remote worker: artifacts (and history) in a directory of its own, with the pairs
        :func:`~pytest_sme2.case_files.href` maps to the controller's."""
        worker = self.config.workerinput["workerid"]  # type: ignore[attr-defined]
        own = Path(tempfile.mkdtemp(prefix=f"pytest-sme2-{worker}-")).resolve()
        self.config.add_cleanup(partial(shutil.rmtree, own, ignore_errors=True))
        self._own = own
        option = self.config.option
        option.sme2_artifacts = str(own / "artifacts")
        remote["paths"] = [[option.sme2_artifacts, remote["root"]]]
        if remote["history"] is not None:
            option.sme2_history = str(own / "history")
            remote["paths"].append([option.sme2_history, remote["history"]])

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """A worker through a socket or ssh gateway is remote: tell it the controller's paths."""
        if node.gateway.spec.popen:
            return
        history = _option_path(self.config, "sme2_history")
        html = getattr(self.config.option, "htmlpath", None)
        node.workerinput[REMOTE_KEY] = {
            "root": str(self.controller_root(node.gateway.id)),
            "history": None if history is None else str(history),
            "html": str(Path(html).resolve()) if html else None,
        }

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: list[Any]) -> None:
        """Leave out the workers named for devices that cannot be reached (``lab.reach``):
        their devices' cases fail, the others run."""
        from pytest_sme2.lab.reach import unreachable

        named = set(pinned_groups(config).values())
        for spec in [spec for spec in specs if spec.id in named and not spec.popen]:
            why = unreachable(spec)
            if why is not None:
                self.unreachable[spec.id] = self._errors[spec.id] = why
                specs.remove(spec)

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        from pytest_sme2.lab.schedule import PinnedScheduling

        pinned = pinned_groups(config)
        if not pinned:
            return None
        from xdist.workermanage import parse_tx_spec_config

        numnodes = len(parse_tx_spec_config(config)) - len(self.unreachable)
        return PinnedScheduling(config.hook, numnodes, log, pinned, self._why)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        """Why the worker went down, for its cases' lines; and a named remote worker is replaced
        by a local one (:func:`local_replacement`) whenever it goes down, also before it
        collected (a lab machine whose pytest cannot start): xdist's clone of its socket gateway
        would wait for ever on a server still holding the dead one."""
        if error is not None:
            lines = str(error).strip().splitlines() or ["no reason given"]
            self._errors[node.gateway.id] = lines[-1][:200]
        spec = node.gateway.spec
        if node.gateway.id in pinned_groups(self.config).values() and not spec.popen:
            local_replacement(spec)

    def _why(self, worker: str) -> str:
        return self._errors.get(worker, "its connection closed")

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        """The case a named worker was running when it went away: one line naming the device."""
        from pytest_sme2.lab.schedule import PinnedScheduling, lost_outcome

        worker = report.node.gateway.id
        if isinstance(sched, PinnedScheduling) and worker in sched.pinned.values():
            report.longrepr = sched.crash_line(crashitem, worker)
            report.sme2_outcome = lost_outcome(crashitem, report.longrepr)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Generator[None, Any, Any]:
        """On a remote worker, a measured test's report carries its files and history lines
        (after the session's own wrapper wrote them)."""
        report = yield
        payload = getattr(report, "sme2_outcome", None)
        if self._own is None or payload is None or report.when != "call":
            return report
        outcome = CaseOutcome.from_json(payload)
        if outcome.case_report is not None:
            from pytest_sme2.lab.shipping import pack

            worker = self.config.workerinput["workerid"]  # type: ignore[attr-defined]
            shipment = pack(outcome, self._own / "artifacts", worker, self._history_lines())
            setattr(report, SHIPMENT_ATTR, shipment.to_json())
        return report

    def _history_lines(self) -> list[str]:
        """The history lines appended since the last shipment."""
        lines: list[str] = []
        assert self._own is not None
        for path in sorted((self._own / "history").glob("*.jsonl")):
            text = path.read_text(encoding="utf-8")
            lines += text[self._shipped.get(path, 0) :].splitlines()
            self._shipped[path] = len(text)
        return [line for line in lines if line.strip()]

    def receive(self, outcome: CaseOutcome, shipment: Shipment) -> CaseOutcome:
        """On the controller: the shipped run directory unpacked under ``worker``'s root, its
        history records appended to that worker's history file here, the outcome moved."""
        from pytest_sme2.judge.history import GitState, HistoryLog
        from pytest_sme2.lab.shipping import relocate, relocated_record, unpack

        root = self.controller_root(shipment.worker)
        unpack(shipment, root)
        history = _option_path(self.config, "sme2_history")
        if history is not None and shipment.history:
            if shipment.worker not in self._logs:
                log = self._logs[shipment.worker] = HistoryLog(history, GitState(), shipment.worker)
                self.config.add_cleanup(log.close)
            for line in shipment.history:
                self._logs[shipment.worker].append(relocated_record(line, shipment.root, root))
        return relocate(outcome, shipment.root, root)


LAB_KEY: pytest.StashKey[Lab] = pytest.StashKey()


def register(config: pytest.Config) -> None:
    """The lab's hooks for this process; a remote worker's own directories; on the controller,
    the fleet's workers checked against ``--tx``."""
    lab = config.stash[LAB_KEY] = Lab(config)
    config.pluginmanager.register(lab, "sme2-lab")
    remote = getattr(config, "workerinput", {}).get(REMOTE_KEY)
    if remote is not None:
        lab.own_directories(remote)
    elif not hasattr(config, "workerinput"):
        check_workers(config)


def received(config: pytest.Config, report: pytest.TestReport) -> CaseOutcome:
    """The outcome a test's report carries, as this controller keeps it: where a remote worker
    shipped its files, unpacked here and the outcome's paths moved to them."""
    outcome = CaseOutcome.from_json(report.sme2_outcome)  # type: ignore[attr-defined]
    data = report.__dict__.pop(SHIPMENT_ATTR, None)
    if data is None or LAB_KEY not in config.stash:
        return outcome
    from pytest_sme2.lab.shipping import Shipment

    outcome = config.stash[LAB_KEY].receive(outcome, Shipment.from_json(data))
    report.sme2_outcome = outcome.to_json()  # type: ignore[attr-defined]
    return outcome
