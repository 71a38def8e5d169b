"""A model really measured on this machine's host device (or any prepared device), as
``sme2_measure`` measures a case (the real export, the real runner, the reference workload timed
beside it where time is judged), and judged as ``sme2_judge`` judges it (``CaseCheck``): for the
judge's tests that need real numbers but not a pytest session around them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pytest_sme2.case_context import case_program
from pytest_sme2.devices.base import Device
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import ModelSpec, get_model
from pytest_sme2.export.program_files import ProgramSpec, prepare_program
from pytest_sme2.export.reference import REFERENCE
from pytest_sme2.judge.baseline import baseline_path
from pytest_sme2.judge.baseline_file import read
from pytest_sme2.judge.check import CaseCheck
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.policy import Policy
from pytest_sme2.measure.case import MeasurePlan, measure
from pytest_sme2.measure.deadline import Deadline
from pytest_sme2.records.measurement import Measurement
from tests.session.contexts import host_case

#: A short plan: these tests judge what a measurement says, not how precisely it says it.
PLAN = MeasurePlan(runs=6, rounds=2, warmup=1, traced_runs=2)


def host_device() -> HostDevice:
    device = HostDevice.from_options(lambda _: None)
    device.prepare()
    return device


def toy_cnn() -> ModelSpec:
    import models  # noqa: F401  (registers toy_cnn)

    return get_model("toy_cnn")


def measure_case(
    device: Device,
    spec: ModelSpec | ProgramSpec,
    workdir: Path,
    plan: MeasurePlan = PLAN,
    dtype: str = "fp32",
) -> Measurement:
    """``spec`` × ``dtype`` measured on ``device`` under ``plan``, beside the reference workload
    where the device's time is judged, the machine's disturbance as it was found: exported, or a
    registered program prepared, and taken as the session's case takes it."""
    artifact = prepare_program(spec) if isinstance(spec, ProgramSpec) else export_model(spec, dtype)
    reference = export_model(REFERENCE, "fp32")
    return measure(
        device,
        case_program(host_case(spec, dtype), artifact),
        plan,
        workdir,
        classifier=None,
        reference=(reference.pte, reference.inputs),
        deadline=Deadline(),
    )


def measure_on_host(device: HostDevice, spec: ModelSpec, workdir: Path) -> Measurement:
    """``spec`` fp32 measured on ``device`` beside the reference workload, judged as measured on
    a quiet machine: beside another xdist worker it rarely is, and whether a busy machine's time
    is judged at all is tests/measure/test_disturbance.py's subject."""
    return replace(measure_case(device, spec, workdir), disturbance=None)


def case_check(
    directory: Path,
    policy: Policy,
    measure: Callable[[str], Measurement],
    *,
    model: str = "toy_cnn",
    dtype: str = "fp32",
    threads: int = 1,
    device_id: str = "host",
    expectations: Expectations | None = None,
) -> CaseCheck:
    """``model``'s ``dtype`` case on ``threads`` threads (toy_cnn's fp32 on one by default) judged
    as ``sme2_judge`` judges it on the device ``device_id``, against the test's ``expectations``
    (none by default), its baseline under ``directory``; ``measure(label)`` takes each fresh
    measurement (without a pause before confirming)."""
    path = baseline_path(directory / "baselines", device_id, model, dtype, threads)
    expected = expectations or Expectations()
    return CaseCheck(
        policy,
        path,
        read(path, update=policy.update),
        expectations=lambda: expected,
        measure=measure,
        settle=lambda recorded_ms: "without a pause",
        nodeid="test_suite.py::test_model",
        device_id=device_id,
        artifacts=directory,
    )
