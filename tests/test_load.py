"""Load and memory per variant: measured by the real runner (host: time and resident memory;
qemu-sme2: method init in exact guest instructions), stored in the baseline, gated, reported."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.baseline import Tolerances, from_measurement, merge
from pytest_sme2.devices.base import Variant
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.gates import Expectations, Status, judge
from pytest_sme2.measure import MeasurePlan
from pytest_sme2.report.load import load_line, load_table
from pytest_sme2.report.markdown import case_report
from pytest_sme2.result import Measurement
from tests.measurements import measure_toy_cnn

TOLERANCES = Tolerances()
PLAN = MeasurePlan(runs=4, rounds=2, warmup=1, traced_runs=2)


@pytest.fixture(scope="module")
def host_measurement(tmp_path_factory: pytest.TempPathFactory) -> Measurement:
    device = HostDevice.from_options(lambda _: None)
    device.prepare()
    return measure_toy_cnn(device, PLAN, tmp_path_factory.mktemp("host"))


@pytest.fixture(scope="module")
def emulated_measurement(
    qemu_device: QemuSme2Device, tmp_path_factory: pytest.TempPathFactory
) -> Measurement:
    return measure_toy_cnn(qemu_device, PLAN, tmp_path_factory.mktemp("qemu"))


def test_host_load_is_timed_and_its_memory_measured(host_measurement: Measurement) -> None:
    load = host_measurement.variants[Variant.OFF].load
    assert load is not None
    assert load.program_load_ms and load.program_load_ms > 0
    assert load.method_init_ms and load.method_init_ms > 0
    assert load.planned_bytes > 0 and load.state_copy_bytes == load.planned_bytes
    assert load.peak_rss_bytes and load.peak_rss_bytes > load.planned_bytes
    assert load.init_instructions is None  # the host does not count instructions
    report = case_report(host_measurement, [])
    assert "## Load and memory" in report and "the runner's copy of the plan" in report


def test_emulated_init_is_counted_exactly_and_per_variant(
    emulated_measurement: Measurement, qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    """Method init in guest instructions: the same count in a second process (to a few hundred
    instructions: allocations follow the paths the runner is given), SME2 on and off apart; no
    time and no resident memory (qemu's own) where time means nothing."""
    on = emulated_measurement.variants[Variant.ON].load
    off = emulated_measurement.variants[Variant.OFF].load
    assert on is not None and off is not None
    assert on.init_instructions and off.init_instructions
    assert on.method_init_ms is None and on.peak_rss_bytes is None
    assert on.planned_bytes == off.planned_bytes > 0
    again = measure_toy_cnn(qemu_device, PLAN, tmp_path).variants[Variant.ON].load
    assert again is not None and again.init_instructions
    assert again.init_instructions == pytest.approx(on.init_instructions, rel=1e-3)
    assert replace(again, init_instructions=on.init_instructions) == on
    table = load_table(emulated_measurement)
    assert table is not None and "M instr" in table.rows[0][2]
    assert (load_line(emulated_measurement) or "").startswith("Method init (weight packing)")


def test_a_20_percent_dearer_init_fails_on_qemu_sme2(emulated_measurement: Measurement) -> None:
    """Judged against a baseline whose init is the measured one ÷ 1.2 (the measurement is then
    20 % dearer), the case fails naming the variant; against its own, it passes."""
    own = from_measurement(emulated_measurement, TOLERANCES)
    passed = judge(emulated_measurement, own, Expectations(), TOLERANCES)
    inits = [v for v in passed if v.gate.startswith("init-instructions")]
    assert [v.status for v in inits] == [Status.PASS, Status.PASS]
    cheaper = {
        name: replace(variant, init_instructions=round(variant.init_instructions / 1.2))
        for name, variant in own.variants.items()
        if variant.init_instructions
    }
    failed = judge(emulated_measurement, replace(own, variants=cheaper), Expectations(), TOLERANCES)
    rose = [v for v in failed if v.gate.startswith("init-instructions") and v.status is Status.FAIL]
    assert len(rose) == 2
    assert "rose" in rose[0].message and "+20.00%" in rose[0].message


def test_an_older_baseline_is_judged_without_load_and_filled_on_update(
    emulated_measurement: Measurement,
) -> None:
    now = from_measurement(emulated_measurement, TOLERANCES)
    older = replace(
        now,
        variants={
            name: replace(variant, init_instructions=None, planned_bytes=None)
            for name, variant in now.variants.items()
        },
    )
    verdicts = judge(emulated_measurement, older, Expectations(), TOLERANCES)
    assert not [v for v in verdicts if v.gate.startswith(("init-", "planned-"))]
    merged, changes = merge(older, now, TOLERANCES)
    assert merged.variants["sme2-on"].init_instructions == now.variants["sme2-on"].init_instructions
    assert any(change.startswith("sme2-on init instructions None → ") for change in changes)


def test_max_init_ms_is_a_ceiling_where_time_means_something(
    host_measurement: Measurement, emulated_measurement: Measurement
) -> None:
    load = host_measurement.variants[Variant.OFF].load
    assert load is not None and load.method_init_ms is not None
    low = Expectations(max_init_ms=load.method_init_ms / 2)
    (verdict,) = [v for v in judge(host_measurement, None, low, TOLERANCES) if "init" in v.gate]
    assert verdict.status is Status.FAIL and "> max_init_ms" in verdict.message
    (skipped,) = [
        v for v in judge(emulated_measurement, None, low, TOLERANCES) if v.gate == "max-init"
    ]
    assert skipped.status is Status.SKIP
