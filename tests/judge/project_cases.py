"""A user project's cases measured and judged on the objects, as a session of the project would
measure and judge them — each case of its settings measured afresh (the real export or registered
program, the real runner, on the real device) and judged through ``CaseCheck`` against the
project's baselines, or recorded into them under update — without a pytest session: the
recording before a session whose subject is what changed, or the unchanged run after one."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from pytest_sme2.devices.base import Device
from pytest_sme2.export import model_spec, program_files
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.export.program_files import ProgramSpec
from pytest_sme2.judge.check import Checked
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.settings import Case, Settings
from tests.judge.host_case import case_check, measure_case


def registered(conftest: Path) -> tuple[ModelSpec | ProgramSpec, ...]:
    """The models and programs a project's ``conftest`` registers, in the order its session
    collects them: the file imported in this process into registries of its own (this worker's
    registries stay as they were)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_spec, "_REGISTRY", {})
        patch.setattr(model_spec, "_ORIGINS", {})
        patch.setattr(program_files, "_REGISTRY", {})
        name = f"project_conftest_{abs(hash(conftest))}"
        spec = importlib.util.spec_from_file_location(name, conftest)
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        return (*model_spec.registered_models(), *program_files.registered_programs())


def judge_cases(
    root: Path,
    chosen: Settings,
    devices: Mapping[str, Device],
    *,
    expectations: Expectations | None = None,
    selected: Callable[[Case], bool] = lambda case: True,
) -> dict[str, Checked]:
    """Each ``selected`` case of the project in ``root`` (registered by its conftest.py, its
    baselines under ``root/baselines``) that ``chosen`` makes, measured afresh on its device of
    ``devices`` (by id) under the settings' plan and judged under their policy against the test's
    ``expectations``; by case id. Its runner's files under ``root/objects``."""
    checked = {}
    for case in chosen.cases(registered(root / "conftest.py")):
        if selected(case):
            checked[case.id] = _judged(root, chosen, devices[case.device.id], case, expectations)
    return checked


def _judged(
    root: Path, chosen: Settings, device: Device, case: Case, expectations: Expectations | None
) -> Checked:
    runs = root / "objects" / case.id

    def measured(label: str) -> Measurement:
        return measure_case(device, case.model, runs / label, chosen.plan, case.dtype)

    check = case_check(
        root,
        chosen.policy,
        measured,
        model=case.model.name,
        dtype=case.dtype,
        threads=case.threads,
        device_id=case.device.directory,
        expectations=expectations,
    )
    return check.check(measured("judged"))
