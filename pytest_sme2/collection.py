"""How the session's cases become tests: a test that asks for ``sme2_case`` parametrized over
them, the ``sme2`` markers checked at collection, each real device's cases kept to one xdist
worker, and every case exported before the first is measured.

Apart from :mod:`pytest_sme2.session` so that the session object stays its hooks and state; each
function here is what one of its collection hooks does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_sme2.case_context import case_of, expectations, or_fail, test_id

if TYPE_CHECKING:
    from pytest_sme2.measure.fleet import Fleet
    from pytest_sme2.settings import Case, Settings


def choose_loadgroup(config: pytest.Config) -> None:
    """With ``-n N`` (or ``--tx``) and no ``--dist``, distribute by device group (``--dist
    loadgroup``) when the fleet has a device whose time is real (its cases must never run two at
    once) or one named for a worker (``lab.schedule`` sends its group there).

    xdist's workers parse the same arguments, with ``-n`` reset: each takes the same decision
    from them, so that its node ids carry the groups the controller schedules by.
    """
    from pytest_sme2.devices.kinds import DeviceKinds
    from pytest_sme2.errors import ConfigError
    from pytest_sme2.measure.fleet import xdist_group
    from pytest_sme2.settings import fleet_specs

    worker = hasattr(config, "workerinput")
    chosen = any(arg.split("=")[0] == "--dist" for arg in config.invocation_params.args)
    # ``--tx`` alone (remote workers: docs/lab.md) distributes as ``-n`` does
    workers = getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None)
    if chosen or not (worker or workers):
        return
    try:
        specs = fleet_specs(config.getoption, config.getini, DeviceKinds.from_hook(config.hook))
    except ConfigError:
        return  # said once, when the tests are collected
    if any(xdist_group(spec) for spec in specs):
        if worker:
            config.option.loadgroup = True
        else:
            config.option.dist = "loadgroup"


def parametrize(metafunc: pytest.Metafunc, settings: Settings) -> dict[str, Case]:
    """Parametrize a test that asks for ``sme2_case`` over model × dtype (× threads), and over
    each registered program (``register_program``: one case, its label as dtype); its cases by
    id (the same for every test)."""
    from pytest_sme2.export.model_spec import registered_models
    from pytest_sme2.export.program_files import registered_programs

    cases = or_fail(lambda: settings.cases((*registered_models(), *registered_programs())))
    metafunc.parametrize("sme2_case", cases, ids=[case.id for case in cases])
    return {case.id: case for case in cases}


def check_collected(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every test's ``sme2`` markers, and group each real device's cases.

    A marker mistake (a misspelt keyword, a share given as text) is a collection error naming
    the test, the keyword and the value, and the test is dropped: found before anything is
    exported or measured, not as a traceback after minutes of emulation. One worker owns one
    real device: its cases form one xdist group (``--dist loadgroup``), so no two of them ever
    run at once; an emulated device's cases may spread.
    """
    from pytest_sme2.errors import ConfigError
    from pytest_sme2.measure.fleet import xdist_group

    # without pytest-xdist (the main job installs none) the marker is nobody's: pytest warns of
    # an unknown mark, and fails the session under --strict-markers
    distributed = config.pluginmanager.hasplugin("xdist")
    reported: set[str] = set()
    kept = []
    for item in items:
        try:
            expectations(item)
        except ConfigError as err:
            test = test_id(item)  # one line per test function, not per parametrized case
            if test not in reported:
                reported.add(test)
                config.hook.pytest_collectreport(
                    report=pytest.CollectReport(test, "failed", str(err), [])
                )
            continue
        kept.append(item)
        case = case_of(item)
        group = xdist_group(case.device) if case is not None else None
        if group is not None and distributed:
            item.add_marker(pytest.mark.xdist_group(group))
    items[:] = kept


def export_collected(cases: Sequence[Case]) -> None:
    """Every collected case exported before the session's first measurement (``prefetch``); a
    registered program has nothing to export. xdist's workers collect the same cases: each starts
    at its own offset of one order (biggest graphs first, as a session alone exports), so two
    workers export different cases side by side instead of queueing on one case's lock."""
    from pytest_sme2.export.prefetch import biggest_first, prefetch
    from pytest_sme2.export.program_files import ProgramSpec
    from pytest_sme2.export.reference import REFERENCE

    if not cases:
        return
    exported = [case for case in cases if not isinstance(case.model, ProgramSpec)]
    # every measurement times the reference workload beside its case (``sme2_reference``)
    pairs = biggest_first(
        dict.fromkeys([*((case.model, case.dtype) for case in exported), (REFERENCE, "fp32")])
    )
    # a worker of ``--tx …//id=NAME`` (a lab's: docs/lab.md) starts where the first does
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    start = len(pairs) * index // workers
    # one session alone exports on every core (its measurements then run alone); xdist's
    # workers already export side by side
    processes = (os.cpu_count() or 1) if "PYTEST_XDIST_WORKER" not in os.environ else 1
    prefetch(pairs[start:] + pairs[:start], processes=processes)


#: The name of the temporary directory every run counted ahead has its own directory under.
COUNT_AHEAD_PREFIX = "sme2-count-ahead-"


def count_collected(
    cases: Sequence[Case],
    fleet: Fleet,
    baseline_path: Callable[[Case], Path],
    fixed_s: float | None,
) -> None:
    """The counted runs of every collected case on a device that keeps its counts, made ahead
    of the first measurement two at a time (:mod:`pytest_sme2.measure.count_ahead`), where one
    session measures every case on a machine of two cores or more, each run under its case's
    deadline (from the baseline at ``baseline_path(case)``; ``fixed_s``: ``--sme2-timeout``).
    Not on an xdist worker: its cases are dealt to it one by one, and the workers already count
    side by side. A case whose device cannot be prepared, whose export failed or whose baseline
    cannot be read is left to its test, which says so."""
    import tempfile

    from pytest_sme2 import progress
    from pytest_sme2.devices.base import EVIDENCE_EXECUTIONS
    from pytest_sme2.errors import Sme2Error
    from pytest_sme2.export.exporter import export_model
    from pytest_sme2.export.program_files import ProgramSpec
    from pytest_sme2.judge.baseline_file import read
    from pytest_sme2.measure.count_ahead import CountProgram, count_ahead, count_jobs

    if "PYTEST_XDIST_WORKER" in os.environ or (os.cpu_count() or 1) < 2:
        return
    programs = []
    for case in cases:
        if case.threads != 1 or isinstance(case.model, ProgramSpec):
            continue
        if not case.device.kind.emulates_cpu:
            continue
        try:
            device = fleet.device(case.device)
            artifact = export_model(case.model, case.dtype)
            deadline = read(baseline_path(case), update=False).deadline(device.info(), fixed_s)
        except Sme2Error:
            continue
        timeout_s = deadline.seconds(EVIDENCE_EXECUTIONS)
        programs.append(CountProgram(device, artifact.pte, artifact.inputs, timeout_s))
    with tempfile.TemporaryDirectory(prefix=COUNT_AHEAD_PREFIX) as workdir:
        jobs = count_jobs(programs, Path(workdir))
        if len(jobs) > 2:  # one case's pair is what a case runs side by side anyway
            with progress.task(f"count {len(jobs)} emulated runs ahead"):
                count_ahead(jobs)
