"""Load and memory per variant: measured by the real runner (host: time and resident memory;
qemu-sme2: method init in exact guest instructions), stored in the baseline, gated, reported."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.devices.host import HostDevice
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.judge.baseline import Tolerances, from_measurement
from pytest_sme2.judge.baseline_file import load, save, to_json
from pytest_sme2.judge.baseline_update import merge
from pytest_sme2.judge.decision import CONFIRMATIONS, judge_confirmed
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import Judge, judge
from pytest_sme2.judge.policy import Policy
from pytest_sme2.measure.case import MeasurePlan, fastest_init
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import LoadMeasurement, Measurement
from pytest_sme2.records.verdict import Status, Verdict
from pytest_sme2.report.load import load_line, load_table
from pytest_sme2.report.markdown import case_report
from tests.judge.host_case import host_device, measure_on_host
from tests.measurements import measure_toy_cnn, scaled

TOLERANCES = Tolerances()
PLAN = MeasurePlan(runs=4, rounds=2, warmup=1, traced_runs=2)


@pytest.fixture(scope="module")
def host_measurement(tmp_path_factory: pytest.TempPathFactory) -> Measurement:
    device = HostDevice.from_options(lambda _: None)
    device.prepare()
    measured = measure_toy_cnn(device, PLAN, tmp_path_factory.mktemp("host"))
    # judged as measured on a quiet machine: beside another xdist worker it rarely is, and whether
    # a busy machine's time is judged at all is tests/measure/test_disturbance.py's subject
    return replace(measured, disturbance=None)


@pytest.fixture(scope="module")
def emulated_measurement(
    narrow_stored_qemu_device: QemuSme2Device, tmp_path_factory: pytest.TempPathFactory
) -> Measurement:
    """toy_cnn on qemu-sme2 as a session measures it: its counts read back where stored (at
    128-bit vectors: what is measured and gated here does not depend on the length)."""
    return measure_toy_cnn(narrow_stored_qemu_device, PLAN, tmp_path_factory.mktemp("qemu"))


def test_host_load_is_timed_and_its_memory_measured(host_measurement: Measurement) -> None:
    load = host_measurement.variants[Variant.OFF].load
    assert load is not None
    assert load.program_load_ms and load.program_load_ms > 0
    assert load.method_init_ms and load.method_init_ms > 0
    assert load.planned_bytes > 0
    assert load.peak_rss_bytes and load.peak_rss_bytes > load.planned_bytes
    assert load.init_instructions is None  # the host does not count instructions
    report = case_report(host_measurement, [])
    assert "## Load and memory" in report and "with a copy of the plan" in report


def test_a_record_that_kept_the_runners_copy_of_the_plan_still_reads() -> None:
    """History lines and kit manifests written while ``state_copy_bytes`` was kept."""
    then = {"planned_bytes": 458_816, "state_copy_bytes": 458_816, "peak_rss_bytes": 160_174_080}
    assert LoadMeasurement.from_json(then) == LoadMeasurement(458_816, 160_174_080)


def test_emulated_init_is_counted_exactly_and_per_variant(
    emulated_measurement: Measurement, narrow_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    """Method init in guest instructions: the same count in a second process, counted now (to a
    few hundred instructions: allocations follow the paths the runner is given), SME2 on and off
    apart; no time and no resident memory (qemu's own) where time means nothing."""
    on = emulated_measurement.variants[Variant.ON].load
    off = emulated_measurement.variants[Variant.OFF].load
    assert on is not None and off is not None
    assert on.init_instructions and off.init_instructions
    assert on.method_init_ms is None and on.peak_rss_bytes is None
    assert on.planned_bytes == off.planned_bytes > 0
    again = measure_toy_cnn(narrow_qemu_device, PLAN, tmp_path).variants[Variant.ON].load
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
        name: replace(variant, figures={"init_instructions": round(count / 1.2)})
        for name, variant in own.variants.items()
        if (count := variant.figures.get("init_instructions"))
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
        variants={name: replace(variant, figures={}) for name, variant in now.variants.items()},
    )
    verdicts = judge(emulated_measurement, older, Expectations(), TOLERANCES)
    assert not [v for v in verdicts if v.gate.startswith(("init-", "planned-"))]
    merged, changes = merge(older, now, TOLERANCES)
    assert merged.variants["sme2-on"].figures == now.variants["sme2-on"].figures
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


def verdicts_of(verdicts: tuple[Verdict, ...], prefix: str) -> list[Verdict]:
    return [v for v in verdicts if v.gate.startswith(prefix)]


def only_time_gates_failed(verdicts: tuple[Verdict, ...]) -> bool:
    return Judge(Policy(TOLERANCES), None, Expectations()).only_time_failed(verdicts)


def test_a_slow_init_is_cleared_by_a_quiet_process_of_any_confirmation(
    host_measurement: Measurement,
) -> None:
    """Method init under a neighbour's memory traffic: slow in the first measurement and the
    first fresh one, quiet in the second — the fresh measurements' init is the fastest of all so
    far, so the quiet process clears it; a regression (every process 20 % slower) fails all three
    confirmations."""
    own = from_measurement(host_measurement, TOLERANCES)
    judge_own = Judge(Policy(TOLERANCES), own, Expectations())
    burst, quiet = scaled(host_measurement, init=1.25), host_measurement

    def confirmations(*fresh: Measurement):
        queue = list(fresh)
        return lambda: (queue.pop(0), "after a pause")

    first = judge_confirmed(burst, judge_own, confirmations(burst, quiet))
    assert first.remeasured_after and "method init" in first.remeasured_after
    assert [v.status for v in verdicts_of(first.verdicts, "init-time")] == [Status.PASS]
    regressed = scaled(host_measurement, init=1.2)
    stays = judge_confirmed(regressed, judge_own, confirmations(*[regressed] * CONFIRMATIONS))
    assert [v.status for v in verdicts_of(stays.verdicts, "init-time")] == [Status.FAIL]
    # fastest_init takes the fastest process of all, variant by variant, and nothing else
    pooled = fastest_init(burst, quiet)
    for variant, vm in pooled.variants.items():
        assert vm.load.method_init_ms == quiet.variants[variant].load.method_init_ms
        assert vm.profile is burst.variants[variant].profile


def test_a_20_percent_slower_init_fails_on_the_same_machine_class(
    host_measurement: Measurement,
) -> None:
    """Against its own time record the host's init time and peak memory pass; 20 % slower
    (fastest of the runs) fails as a time gate, confirmed by a fresh measurement; 20 % faster is
    news to record; 20 % more resident memory fails, and is not re-measured."""
    own = from_measurement(host_measurement, TOLERANCES)
    same = judge(host_measurement, own, Expectations(), TOLERANCES)
    assert [v.status for v in verdicts_of(same, "init-time")] == [Status.PASS]
    assert [v.status for v in verdicts_of(same, "peak-memory")] == [Status.PASS]

    slower = judge(scaled(host_measurement, init=1.2), own, Expectations(), TOLERANCES)
    (rose,) = verdicts_of(slower, "init-time")
    assert rose.status is Status.FAIL and rose.gate == "init-time[sme2-off]"
    assert "rose" in rose.message and "+20.0%" in rose.message
    assert only_time_gates_failed(slower)

    faster = judge(scaled(host_measurement, init=0.8), own, Expectations(), TOLERANCES)
    (fell,) = verdicts_of(faster, "init-time")
    assert fell.status is Status.PASS and "record it with --sme2-update-baselines" in fell.message

    fatter = judge(scaled(host_measurement, rss=1.2), own, Expectations(), TOLERANCES)
    (grew,) = verdicts_of(fatter, "peak-memory")
    assert grew.status is Status.FAIL and "peak resident memory" in grew.message
    assert not only_time_gates_failed(fatter)
    leaner = judge(scaled(host_measurement, rss=0.8), own, Expectations(), TOLERANCES)
    assert verdicts_of(leaner, "peak-memory")[0].status is Status.PASS


def test_an_older_time_record_is_judged_without_load_and_filled_on_update(
    host_measurement: Measurement, tmp_path: Path
) -> None:
    """A baseline file written before the time record kept load and memory (edited by hand to
    that shape) reads, is judged without them (saying so), and an update fills them; a later
    update keeps them where they moved within tolerance and replaces them where beyond."""
    doc = json.loads(to_json(from_measurement(host_measurement, TOLERANCES)))
    for key in ("init_time_percent", "peak_rss_percent"):
        del doc["tolerances"][key]
    for record in doc["machines"].values():
        for times in record["variants"].values():
            for key in ("program_load_ms", "method_init_ms", "runner_peak_rss_bytes"):
                del times[key]
    path = tmp_path / "toy_cnn-fp32.json"
    path.write_text(json.dumps(doc))
    older = load(path)
    assert older is not None

    verdicts = judge(host_measurement, older, Expectations(), TOLERANCES)
    skipped = {v.gate: v for v in verdicts if v.gate in ("init-time", "peak-memory")}
    assert {v.status for v in skipped.values()} == {Status.SKIP}
    assert "not judged: the time record has no init time; --sme2-update-baselines records it" in (
        skipped["init-time"].message
    )
    assert not verdicts_of(verdicts, "init-time[") and not verdicts_of(verdicts, "peak-memory[")

    filled, changes = merge(older, from_measurement(host_measurement, TOLERANCES), TOLERANCES)
    assert any("sme2-off method init ms None → " in line for line in changes)
    assert any("sme2-off peak resident memory bytes None → " in line for line in changes)
    save(path, filled)
    stored = load(path)
    assert stored is not None
    (times,) = stored.machines.values()
    figures = times.variants["sme2-off"].figures
    load_ms = figures["method_init_ms"]
    assert load_ms is not None and figures["runner_peak_rss_bytes"]

    within = from_measurement(scaled(host_measurement, init=1.1), TOLERANCES)
    kept, changes = merge(stored, within, TOLERANCES)
    assert changes == () and to_json(kept) == to_json(stored)
    beyond = from_measurement(scaled(host_measurement, init=1.2), TOLERANCES)
    moved, changes = merge(stored, beyond, TOLERANCES)
    (record,) = moved.machines.values()
    assert [line for line in changes if "method init" in line]
    method_init_ms = record.variants["sme2-off"].figures["method_init_ms"]
    assert method_init_ms == pytest.approx(load_ms * 1.2, rel=1e-3)


def test_a_time_record_holding_the_sessions_peak_memory_is_not_judged_by_it_and_update_replaces_it(
    host_measurement: Measurement, tmp_path: Path
) -> None:
    """A record written while runners reported ``ru_maxrss`` (the pytest session's 580 MiB, under
    the old key) reads, its memory is not judged (saying so), and an update records the runner's
    own figure under the new key, the old one gone."""
    doc = json.loads(to_json(from_measurement(host_measurement, TOLERANCES)))
    for record in doc["machines"].values():
        for times in record["variants"].values():
            del times["runner_peak_rss_bytes"]
            times["peak_rss_bytes"] = 580 << 20
    path = tmp_path / "toy_cnn-fp32.json"
    path.write_text(json.dumps(doc))
    older = load(path)
    assert older is not None

    verdicts = judge(host_measurement, older, Expectations(), TOLERANCES)
    (memory,) = [v for v in verdicts if v.gate == "peak-memory"]
    assert memory.status is Status.SKIP
    assert "the time record has no peak resident memory; --sme2-update-baselines" in memory.message

    filled, changes = merge(older, from_measurement(host_measurement, TOLERANCES), TOLERANCES)
    assert any("sme2-off peak resident memory bytes None → " in line for line in changes)
    save(path, filled)
    (times,) = json.loads(path.read_text())["machines"].values()
    assert "peak_rss_bytes" not in times["variants"]["sme2-off"]
    own = times["variants"]["sme2-off"]["runner_peak_rss_bytes"]
    assert own == host_measurement.variants[Variant.OFF].load.peak_rss_bytes < 100 << 20


def heavy(layers: int) -> ModelSpec:
    """``layers`` 2048² linears (16 MiB of fp32 weights each), the same activations whatever
    their number."""
    import torch
    from torch import nn

    def build() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(*(nn.Linear(2048, 2048) for _ in range(layers))).eval()

    def inputs(seed: int) -> tuple[torch.Tensor, ...]:
        return (torch.randn(1, 2048, generator=torch.Generator().manual_seed(seed)),)

    return ModelSpec("heavy", build, inputs, f"{layers} 2048² linears", ("fp32",))


def test_the_peak_memory_gate_fails_a_model_whose_weights_grow_by_a_fifth(tmp_path: Path) -> None:
    """Recorded at five layers, judged at six: the runner's own peak resident memory (the packed
    weights live there) rises beyond the default 10 % tolerance and fails the case, while the
    time gates are opened wide so that only memory (and the sixth layer's structure) can."""
    five = measure_on_host(host_device(), heavy(5), tmp_path / "five")
    (recorded,) = {vm.load.peak_rss_bytes for vm in five.variants.values() if vm.load}
    assert recorded and 100 << 20 < recorded < 400 << 20  # the weights and their packed copy
    wide = Tolerances(latency_percent=400, speedup_percent=400, init_time_percent=400)
    stored = from_measurement(five, wide)

    six = measure_on_host(host_device(), heavy(6), tmp_path / "six")
    verdicts = Judge(Policy(wide), stored, Expectations())(six)
    failed = {v.gate: v for v in verdicts if v.status is Status.FAIL}
    assert set(failed) == {"peak-memory[sme2-off]", "structure[sme2-off]"}, failed
    assert re.fullmatch(
        r"peak resident memory of heavy\[fp32\] on host \(sme2-off\) rose [\d.,]+ → [\d.,]+ "
        r"MiB \(\+1\d\.\d%\), beyond the 10% tolerance of this machine class's record",
        failed["peak-memory[sme2-off]"].message,
    )
