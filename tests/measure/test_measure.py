"""measure(): interleaved rounds, traced runs, and on/off parity of the outputs — on the host
device with a real export (one variant) and, for parity, on real tensor files."""

from __future__ import annotations

import io
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import models  # noqa: F401  (registers toy_cnn)
from pytest_sme2 import progress
from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import get_model
from pytest_sme2.measure import case as measure_module
from pytest_sme2.measure.case import MeasurePlan
from pytest_sme2.measure.output_checks import parity
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.runner.tensors import read_tensors, write_tensors
from tests.measurements import OFF_OPS, ON_OPS, measure_toy_cnn, variant


def test_runs_are_split_evenly_over_rounds():
    assert MeasurePlan(runs=10, rounds=4).runs_per_round() == [3, 3, 2, 2]
    assert MeasurePlan(runs=2, rounds=4).runs_per_round() == [1, 1]
    with pytest.raises(ConfigError, match="--sme2-runs must be ≥ 1"):
        MeasurePlan(runs=0)


def test_host_measurement_of_a_real_model(tmp_path: Path):
    device = HostDevice()
    device.prepare()
    m = measure_toy_cnn(device, MeasurePlan(runs=6, warmup=1, rounds=3, traced_runs=2), tmp_path)
    assert list(m.variants) == [Variant.OFF]  # x86: no SME2
    off = m.variants[Variant.OFF]
    assert len(off.latencies_ms) == 6 and off.timing_warmup == 1
    assert off.profile.runs == 2 and off.profile.warmup == 1
    assert m.comparison is None and m.parity is None and m.instruction_ratio is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "sme2-off-round0",
        "sme2-off-round1",
        "sme2-off-round2",
        "sme2-off-traced",
    ]
    # the traced run's ETDump, parsed once here, rides on the record in memory only
    assert off.trace is not None and off.trace.path == off.etdump
    assert read_etdump(off.etdump).runs == off.trace.runs
    saved = m.to_json(tmp_path)
    assert "trace" not in saved["variants"][0]
    back = Measurement.from_json(saved, tmp_path)
    assert back == m and back.variants[Variant.OFF].trace is None


def with_outputs(v: Variant, path: Path, arrays):
    write_tensors(path, arrays)
    vm = variant(v, ON_OPS if v is Variant.ON else OFF_OPS, [1.0])
    return replace(vm, outputs=path)


def test_parity_judges_on_against_off_with_the_dtype_tolerance(tmp_path: Path):
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    same = {
        Variant.ON: with_outputs(Variant.ON, tmp_path / "on", [x + 1e-7]),
        Variant.OFF: with_outputs(Variant.OFF, tmp_path / "off", [x]),
    }
    assert parity(same, "toy", "fp32").ok
    broken = {**same, Variant.ON: with_outputs(Variant.ON, tmp_path / "on2", [x * 1.5])}
    numerics = parity(broken, "toy", "fp32")
    assert not numerics.ok and numerics.max_abs == pytest.approx(0.5)
    assert parity({Variant.OFF: same[Variant.OFF]}, "toy", "fp32") is None
    odd = {**same, Variant.ON: with_outputs(Variant.ON, tmp_path / "on3", [x[:2]])}
    with pytest.raises(RunnerError, match=r"outputs of toy\[fp32\] differ: output 0 has shape"):
        parity(odd, "toy", "fp32")


def test_settle_returns_at_once_on_a_machine_at_baseline_speed_and_gives_up_on_a_slow_one(
    tmp_path: Path,
):
    from pytest_sme2.export.reference import REFERENCE
    from pytest_sme2.measure.settle import settle

    artifact = export_model(REFERENCE, "fp32")
    device = HostDevice()
    device.prepare()
    reference = (artifact.pte, artifact.inputs)
    # An undisturbed time 1000× slower than today's: the machine is at (well under) it.
    fast = settle(device, reference, 1000.0, tmp_path / "fast", threads=1, tolerance=0.1)
    assert fast.settled and fast.ratio < 0.01
    assert fast.describe().startswith("machine at its undisturbed speed after 0 s: reference")
    assert [p.name for p in (tmp_path / "fast").iterdir()] == ["settle-0"]  # one probe: at once
    # An undisturbed time 10^6× faster than anything this machine can do: it never settles, and
    # the wait ends at the timeout, having probed between pauses.
    slow = settle(
        device, reference, 1e-7, tmp_path / "slow", threads=1, tolerance=0.1,
        timeout_s=1.0, pause_s=0.3,
    )  # fmt: skip
    assert not slow.settled and slow.ratio > 1000 and slow.waited_s >= 1.0 - 0.3
    assert len(list((tmp_path / "slow").iterdir())) >= 2
    assert slow.describe().startswith("machine still slow after ")


def test_a_confirming_measurement_waits_a_pause_and_for_the_settled_machine(tmp_path: Path):
    """The pause spreads confirmations in time; the settling is said where the speed is known."""
    from pytest_sme2.export.reference import REFERENCE
    from pytest_sme2.measure.settle import CONFIRM_PAUSE_S, MachineSpeed, settle_before_confirming

    artifact = export_model(REFERENCE, "fp32")
    device = HostDevice()
    device.prepare()
    reference = (artifact.pte, artifact.inputs)

    def confirm(speed: MachineSpeed, recorded: float | None, name: str) -> tuple[str, float]:
        started = time.monotonic()
        how = settle_before_confirming(
            device, reference, speed, recorded, tmp_path / name, threads=1, pause_s=0.2
        )
        return how, time.monotonic() - started

    how, took = confirm(MachineSpeed(), None, "unknown")
    assert how == "after a 0.2 s pause" and took >= 0.2
    assert not (tmp_path / "unknown").exists()  # no speed to settle back to: no probe
    how, _ = confirm(MachineSpeed(best_ms=1000.0), None, "known")
    assert how.startswith("after a 0.2 s pause, machine at its undisturbed speed after 0 s: ")
    assert [p.name for p in (tmp_path / "known").iterdir()] == ["settle-0"]
    low, high = CONFIRM_PAUSE_S
    assert 1.0 <= low < high  # longer than a bursty neighbour's rests (1–3 s)


def test_machine_speed_is_the_fastest_reference_seen_or_the_baselines():
    from pytest_sme2.measure.settle import MachineSpeed
    from tests.measurements import measurement

    speed = MachineSpeed()
    assert speed.undisturbed_ms(None) is None
    assert speed.undisturbed_ms(0.2) == 0.2
    speed.observe(measurement())  # nothing timed beside it: no information
    assert speed.best_ms is None
    speed.observe(replace(measurement(), reference_ms=(0.18, 0.21, 0.19)))
    speed.observe(replace(measurement(), reference_ms=(0.14, 0.13, 0.15)))
    speed.observe(replace(measurement(), reference_ms=(0.16, 0.17, 0.16)))
    assert speed.best_ms == 0.13
    assert speed.undisturbed_ms(0.196) == 0.13  # a baseline recorded while the machine was slow
    assert speed.undisturbed_ms(0.12) == 0.12


def test_the_fastest_of_two_measurements_is_the_one_taken_while_the_machine_was_fastest():
    from pytest_sme2.measure.case import fastest
    from tests.measurements import measurement

    disturbed = measurement(off_latencies=(10.8, 10.9, 10.7))
    settled = measurement(off_latencies=(10.0, 10.2, 9.9))
    assert fastest(disturbed, settled) is settled and fastest(settled, disturbed) is settled
    # With the reference timed beside both, its fastest run says which machine was undisturbed:
    # the model's own time cannot, a regression moves it too.
    burst = measurement(off_latencies=(11.6, 11.7), reference_ms=(0.23, 0.24))
    quiet = measurement(off_latencies=(11.9, 12.0), reference_ms=(0.2, 0.21))
    assert fastest(burst, quiet) is quiet and fastest(quiet, burst) is quiet


def test_outputs_that_do_not_fit_the_program_fail_naming_device_and_variant(tmp_path: Path):
    """The runner's outputs must have the shapes of the export's eager outputs."""
    artifact = export_model(get_model("toy_cnn"), "fp32")
    device = HostDevice()
    device.prepare()
    plan = MeasurePlan(runs=1, warmup=0, rounds=1, traced_runs=1)

    def measured(expected: Path):
        return measure_toy_cnn(device, plan, tmp_path / expected.stem, expected_outputs=expected)

    assert measured(artifact.expected_outputs).variants  # the real ones fit
    (real,) = read_tensors(artifact.expected_outputs)
    other = tmp_path / "other.tensors"
    write_tensors(other, [real[..., :1]])
    with pytest.raises(RunnerError) as failure:
        measured(other)
    assert str(failure.value).startswith("host (sme2-off): ")
    assert (
        f"the outputs do not fit the program: output 0 has shape {real.shape}, eager PyTorch's "
        f"is {real[..., :1].shape}" in str(failure.value)
    )


def test_a_slow_measurement_says_which_variant_and_step_it_is_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real host measurement, with the quiet period at zero as if it had run long: every
    step is said, and the end line has its seconds per step."""
    sink = io.StringIO()
    monkeypatch.setattr(progress, "_SINK", None)
    monkeypatch.setattr(measure_module, "QUIET_S", 0.0)
    progress.configure(sink)
    device = HostDevice()
    device.prepare()
    measure_toy_cnn(device, MeasurePlan(runs=2, warmup=0, rounds=2, traced_runs=1), tmp_path)
    end = sink.getvalue().splitlines()[-1]
    assert re.search(
        r"measure toy_cnn\[fp32\] on host \S+ s: sme2-off timing \S+, sme2-off traced run \S+, "
        r"sme2-off evidence run \S+$",
        end,
    ), end
