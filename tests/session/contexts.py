"""One test of a case as the session builds it, for tests of what happens inside a user's test
without a pytest session around it: the session's settings from options as pytest resolves them,
a case on the host, the case's context (:class:`~pytest_sme2.case_context.CaseContext`) of a real
export, and an item to leave the outcome on that the running session does not report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.case_context import CaseContext, case_program, or_fail
from pytest_sme2.devices.base import Device
from pytest_sme2.devices.kinds import BUILT_IN_KINDS
from pytest_sme2.devices.spec import parse_device_specs
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.judge.baseline import baseline_path
from pytest_sme2.judge.baseline_file import read
from pytest_sme2.measure.fleet import Fleet
from pytest_sme2.measure.settle import MachineSpeed
from pytest_sme2.settings import CATEGORY_OVERRIDES_INI, FLEET_INI, OPTIONS, Case, Settings, resolve

#: a short plan, time judged beside the other xdist worker at 25 % (see
#: tests/session/test_plugin.py)
FAST = {
    "sme2_runs": "12",
    "sme2_rounds": "3",
    "sme2_traced_runs": "2",
    "sme2_warmup": "2",
    "sme2_latency_tolerance": "25",
    "sme2_init_time_tolerance": "50",
    "sme2_judge_disturbed": True,
}


def settings(root: Path, **options: Any) -> Settings:
    """The session's settings as pytest resolves them from ``options`` (by dest) over the
    defaults, on the host, the baselines under ``root``."""
    given = {**FAST, "sme2_device": "host", "sme2_baseline_dir": str(root), **options}
    return project_settings(root, **given)


def project_settings(root: Path, **options: Any) -> Settings:
    """The settings of a session in the project ``root`` run with ``options`` (by dest), every
    other option its default, as pytest resolves them."""
    defaults = {o.dest: o.default for o in OPTIONS} | {FLEET_INI: "", CATEGORY_OVERRIDES_INI: []}
    return resolve(options.get, defaults.get, root, BUILT_IN_KINDS)


def host_case(spec: ModelSpec, dtype: str = "fp32") -> Case:
    """``spec`` × ``dtype`` on the host, one thread."""
    (host,) = parse_device_specs("host", BUILT_IN_KINDS)
    return Case(spec, dtype, 1, False, host, False)


def twin(request: pytest.FixtureRequest) -> pytest.Item:
    """A twin of the requesting test's item, as a user's test of the case would be (its markers,
    its stash), that the running session does not run: the outcome a context leaves on it is the
    test's to assert, not the session's to write report files of."""
    return pytest.Function.from_parent(
        request.node.parent, name=f"{request.node.name}-judged", callobj=request.function
    )


def case_context(
    node: pytest.Item,
    case: Case,
    chosen: Settings,
    device: Device,
    reference: tuple[Path, Path],
    directory: Path,
) -> CaseContext:
    """``case``'s context as ``Sme2Session.case_context`` gathers it, its baseline as the file
    under ``chosen.baseline_dir`` holds it now."""
    path = baseline_path(chosen.baseline_dir, case.device.directory, case.model.name, case.dtype, 1)
    return CaseContext(
        node=node,
        case=case,
        settings=chosen,
        policy=chosen.policy,
        program=case_program(case, export_model(case.model, case.dtype)),
        device=device,
        fleet=Fleet(lambda _: None),
        baseline_path=path,
        stored=or_fail(lambda: read(path, update=chosen.update_baselines)),
        directory=directory,
        reference=reference,
        speed=MachineSpeed(),
    )
