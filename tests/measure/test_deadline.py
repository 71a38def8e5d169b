"""Deadlines from what the baseline knows: a real host measurement records the times, and the
next measurement's runner calls get deadlines that fit the case, far inside the device's default.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import models  # noqa: F401  (registers toy_cnn)
from pytest_sme2.devices.base import RunRequest
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.devices.qemu_guest import EMULATED_TIMEOUT_S
from pytest_sme2.judge.baseline import Tolerances, from_measurement
from pytest_sme2.judge.baseline_file import load
from pytest_sme2.measure.case import MeasurePlan
from pytest_sme2.measure.deadline import (
    EMULATED_INSTRUCTIONS_PER_S,
    EMULATED_MARGIN_S,
    NATIVE_MARGIN_S,
    SLACK,
    Deadline,
    case_deadline,
)
from pytest_sme2.runner.invoke import DEFAULT_TIMEOUT_S, Executions, RunResult
from tests.measurements import EMULATOR, measure_toy_cnn

BASELINES = Path(__file__).parents[2] / "baselines"


class RecordingHost(HostDevice):
    """The real host device, noting the plan of every runner call it makes."""

    def __init__(self) -> None:
        super().__init__()
        self.plans: list[Executions] = []

    def run(self, request: RunRequest) -> RunResult:
        self.plans.append(request.executions)
        return super().run(request)


def test_nothing_known_leaves_each_call_to_its_device_and_the_option_wins() -> None:
    assert Deadline().seconds(12) is None  # the device's own default
    assert case_deadline(None, time_meaningful=False).seconds(12) is None
    assert case_deadline(20.0, time_meaningful=False).seconds(12) == 20.0
    assert Deadline(fixed_s=20.0, execution_s=5.0).seconds(1000) == 20.0


def test_a_native_case_gets_a_deadline_from_its_own_classes_latencies(tmp_path: Path) -> None:
    device = RecordingHost()
    device.prepare()
    plan = MeasurePlan(runs=6, warmup=1, rounds=3, traced_runs=2)

    def measured(deadline: Deadline | None, label: str):
        return measure_toy_cnn(device, plan, tmp_path / label, deadline=deadline)

    first = measured(None, "first")
    assert {p.timeout_s for p in device.plans} == {None}  # no baseline yet: the device's default
    stored = from_measurement(first, Tolerances())
    info = device.info()
    deadline = stored.deadline(info, None)
    record = stored.record_for(info)
    assert record is not None
    slowest = max(record.variants["sme2-off"].latency.samples_ms) / 1000
    assert deadline == Deadline(execution_s=slowest, margin_s=NATIVE_MARGIN_S)

    device.plans.clear()
    measured(deadline, "second")
    assert len(device.plans) == 3 + 1  # three timing rounds and the traced run
    for run in device.plans:
        assert run.timeout_s == NATIVE_MARGIN_S + SLACK * (run.warmup + run.runs) * slowest
        assert run.timeout_s < DEFAULT_TIMEOUT_S / 10  # a hang is caught in about a minute

    other = replace(info, machine_class={**info.machine_class, "cores": "64"})
    assert stored.deadline(other, None) == Deadline()  # another class's times do not count
    assert stored.deadline(info, 30.0).seconds(5) == 30.0


@pytest.mark.parametrize("case", ["vit_tiny-int8", "toy_cnn-fp32"])
def test_an_emulated_case_gets_a_deadline_from_its_instruction_count(case: str) -> None:
    stored = load(BASELINES / "qemu-sme2" / f"{case}.json")
    assert stored is not None
    deadline = stored.deadline(EMULATOR, None)
    most = max(v.instructions or 0 for v in stored.variants.values())
    assert deadline == Deadline(
        execution_s=most / EMULATED_INSTRUCTIONS_PER_S, margin_s=EMULATED_MARGIN_S
    )
    # The counted run (two inferences under the execution log) took 5–14 s here: the deadline
    # leaves more than tenfold room and is still a fraction of the hour a hang cost before.
    evidence = deadline.seconds(2)
    assert evidence is not None and 140 < evidence < EMULATED_TIMEOUT_S / 5


def test_devices_are_handed_numbers_and_reach_no_baseline() -> None:
    """A device used to reach the stored baselines through its deadline (devices.base →
    deadline → baseline → devices.base, a cycle): measure now hands it seconds."""
    import subprocess
    import sys

    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pytest_sme2.devices.kinds\n"
            "print(sorted(m for m in sys.modules if m.startswith('pytest_sme2.')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "pytest_sme2.devices.qemu" in loaded and "pytest_sme2.devices.android" in loaded
    assert "pytest_sme2.measure.deadline" not in loaded
    assert "pytest_sme2.judge.baseline" not in loaded
